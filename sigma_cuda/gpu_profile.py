"""Where a ``cuda`` training step's time goes; run on a GPU by ``gpu_check.sh`` (needs sigmann-bench).

For Sigma's MNIST MLP at batch 100 and 4096 it prints, per step:

* ``wall``: steps back to back, the device synchronised only at the ends (what ``sigma bench`` reports);
* ``host``: how long Python takes to queue one step (measured while the device is held busy, so
  that nothing the host does waits for it);
* ``device``: the device's own time for one step with every launch already queued (CUDA events
  around steps queued behind a busy kernel): the floor that launching faster (a CUDA graph) could reach;
* the CUDA kernels launched from Python per step (none when the step is replayed as a CUDA graph,
  as ``sigma train`` does; ``-unrecorded``: replay off), and the host's top functions by own time (cProfile).

``wall`` near ``host`` and well above ``device`` means the step is bound by Python and launches;
``wall`` near ``device`` means the GPU work itself is what to shrink.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import cupy
import numpy

from sigmann_bench.bench import WORKLOADS, build_trainer
from sigmann_bench.gpu import make_batches
from sigmann_replay import StepReplay

BUSY = cupy.RawKernel(r"""
extern "C" __global__ void busy(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
""", "busy")


def launches_per_step(trainer, batch) -> int:
    """Launches of kernels.cu's kernels in one step (CuPy's own ufuncs, reductions and cuBLAS calls come on top:
    see their call counts in the profile)."""
    kernels, counted = trainer.handler.kernels, [0]

    def counting(kernel):
        def launch(*args):
            counted[0] += 1
            return kernel(*args)

        return launch

    saved = dict(kernels._k), dict(kernels._labelled)
    kernels._k.update({k: counting(v) for k, v in saved[0].items()})
    kernels._labelled.update({k: counting(v) for k, v in saved[1].items()})
    try:
        trainer.run_iteration(batch)
    finally:
        kernels._k.update(saved[0])
        kernels._labelled.update(saved[1])
    return counted[0]


def profile(name, batch_size, steps, replay=True):
    spec = dict(WORKLOADS["sigma-mlp"], name=name)
    trainer = build_trainer(spec, "cuda", replay=replay)
    batches = [trainer.handler.pin_batch(b) for b in make_batches(batch_size, n=4)]
    step = trainer.run_iteration
    for i in range(20):
        step(batches[i % 4])
    device = cupy.cuda.Device()
    device.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        step(batches[i % 4])
    device.synchronize()
    wall = (time.perf_counter() - t0) / steps
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    BUSY((1,), (1,), (numpy.uint64(int(max(0.3, 3 * wall * steps) * 1e9)),))
    start.record()
    t0 = time.perf_counter()
    for i in range(steps):
        step(batches[i % 4])
    host = (time.perf_counter() - t0) / steps
    end.record()
    end.synchronize()
    device_ms = cupy.cuda.get_elapsed_time(start, end) / steps
    raw = launches_per_step(trainer, batches[0])
    device.synchronize()
    replay = StepReplay.of(trainer)  # a "replayed" row that replayed nothing would time unrecorded steps
    replayed = f"{replay.replayed} of {20 + 2 * steps + 1} steps replayed" if replay else "replay off"
    print(f"{name:<14} batch {batch_size:>5}: wall {wall * 1e3:7.3f} ms  host {host * 1e3:7.3f} ms  "
          f"device {device_ms:7.3f} ms  ({batch_size / wall:,.0f} samples/s; {raw} kernels.cu launches from Python "
          f"a step; {replayed})")
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(steps):
        step(batches[i % 4])
    profiler.disable()
    device.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:4000])


def main():
    print(f"device: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, CuPy {cupy.__version__}")
    profile("sigma-mlp", 100, 200)
    profile("sigma-mlp-unrecorded", 100, 200, replay=False)
    profile("sigma-mlp-4k", 4096, 40)
    return 0


if __name__ == "__main__":
    sys.exit(main())

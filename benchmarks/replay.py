"""Replayed against unrecorded training steps, in one process: ``python benchmarks/replay.py HANDLER WORKLOAD [ROUNDS]``.

WORKLOAD is one of ``sigma bench``'s (sigma-mlp, small-mlp, probe). Rounds alternate between
replay on, replay off, the hand-written NumPy loop and the GEMMs alone; printed: the median and
minimum of the round medians (µs per step) and each one's ratio to the loop.
"""

import statistics
import sys
import time

from sigmann_bench import bench


def main(handler="cpu", workload="small-mlp", rounds=20):
    spec = dict(bench.WORKLOADS[workload], name=workload)
    batch = spec.get("batch", bench.BATCH)
    batches = bench.make_batches(n=5, batch=batch)
    reference = bench.build_trainer(spec, "numpy")
    hand = bench.build_hand(spec, reference)
    gemms = bench.GemmsOnly(bench.dense_parameters(reference), batch)
    systems = {"replay on": bench.build_trainer(spec, handler, replay=True).run_iteration,
               "replay off": bench.build_trainer(spec, handler, replay=False).run_iteration,
               "numpy loop": lambda b: hand.step(b["inputs"], b["targets"]),
               "gemms only": lambda b: gemms.step(b["inputs"], b["targets"])}
    steps = 200 if batch < 10 else 40
    results = {name: [] for name in systems}
    for _ in range(int(rounds)):
        for name, step in systems.items():
            for i in range(5):
                step(batches[i])
            start = time.perf_counter()
            for i in range(steps):
                step(batches[i % 5])
            results[name].append((time.perf_counter() - start) / steps * 1e6)
    loop = statistics.median(results["numpy loop"])
    for name, times in results.items():
        median = statistics.median(times)
        print(f"{name:11s} median {median:9.1f} us  min {min(times):9.1f} us  {median / loop:.2f}x the loop")


if __name__ == "__main__":
    main(*sys.argv[1:])

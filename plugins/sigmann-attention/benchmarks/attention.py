"""The baby GPT's training step and the attention op alone: Sigma's cpu and numpy handlers against PyTorch eager.

1. The step of examples/gpt_chars.toml's network (4 blocks, 4 heads, width 128, context 64, batch 12,
   vocabulary 128, float32, AdamW with weight decay 0.1 and clipping at 1.0), through the real framework path
   (``sigmann_attention.GPT`` -> Network -> ``Trainer.run_iteration``), against its PyTorch twin
   (benchmarks/torch_gpt.py: the same layers, ``torch.optim.AdamW``, ``clip_grad_norm_``) on the same threads.
2. The ``attention`` op alone, forward and backward (batch 4, 4 heads of 32), at T = 64, 256 and 1024, against
   PyTorch's ``scaled_dot_product_attention(is_causal=True)``.
3. Peak memory of one forward and backward of the op at T = 256 and 1024: how far the process's peak RSS rises
   over a warmed-up baseline, each in a fresh process (numba's buffers are invisible to tracemalloc; Linux
   only). The tiled ``cpu`` kernel keeps O(T) per head, the portable rule the (T, T) weights.

Each time is the best of ``--rounds`` round medians (``--iterations`` calls each; systems alternate within a
round): the machine this was written on is shared, so the best round is the least disturbed one.

Usage: ``python plugins/sigmann-attention/benchmarks/attention.py [--quick] [--json] [--threads N] [--rounds R]
[--iterations I] [--cpu-time]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if "--threads" in sys.argv:  # before NumPy, numba and torch start their thread pools
    _threads = sys.argv[sys.argv.index("--threads") + 1]
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_name] = _threads

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # torch_gpt, the twin

VOCABULARY, CONTEXT, WIDTH, HEADS, LAYERS, BATCH = 128, 64, 128, 4, 4, 12
ADAMW = {"learning_rate": 1e-3, "weight_decay": 0.1, "no_decay": ["*.biases", "*.gamma", "*.beta"], "clip_norm": 1.0}
ATTENTION_BATCH, HEAD_WIDTH = 4, 32


def batches(n=4, seed=0):
    rng = np.random.default_rng(seed)
    texts = [rng.integers(0, VOCABULARY, (BATCH, CONTEXT + 1)) for _ in range(n)]
    return [{"inputs": t[:, :-1].copy(), "targets": t[:, 1:, None].copy()} for t in texts]


def sigma_gpt(handler_name):
    from sigma_core import Network, Trainer, build, create_handler
    from sigmann_attention import GPT

    trainer = Trainer(Network(GPT(VOCABULARY, CONTEXT, WIDTH, HEADS, LAYERS)),
                      build("optimiser", {"type": "adamw", **ADAMW}), training_iterator=[])
    trainer.initialise(create_handler(handler_name, dtype="float32", seed=0))
    return trainer.run_iteration


def torch_gpt_step():
    import torch
    import torch_gpt

    torch.manual_seed(0)
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    model = torch_gpt.TorchGPT(VOCABULARY, CONTEXT, WIDTH, HEADS, LAYERS)
    optimiser = torch_gpt.adamw(model, ADAMW["learning_rate"], ADAMW["weight_decay"], ADAMW["no_decay"])

    def step(batch):
        ids, targets = torch.from_numpy(batch["inputs"]), torch.from_numpy(batch["targets"][..., 0])
        return torch_gpt.train_step(model, optimiser, ids, targets, ADAMW["clip_norm"])

    return step


def sigma_attention(handler_name, steps):
    """One forward and backward of the op on (4, T, 3·128) projections."""
    from sigma_core import create_handler

    handler = create_handler(handler_name, dtype="float32", seed=0)
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((ATTENTION_BATCH, steps, 3 * HEADS * HEAD_WIDTH)).astype(np.float32)
    seed = handler.asarray(rng.standard_normal((ATTENTION_BATCH, steps, HEADS * HEAD_WIDTH)).astype(np.float32))

    def step(_):
        with handler.session(), handler.tape() as tape:
            x = handler.asarray(qkv)
            tape.watch(x)
            tape.gradient(handler.op("attention", x, heads=HEADS), [x], seed=seed)

    return step


def torch_attention(steps):
    import torch
    from torch_gpt import packed_sdpa

    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    rng = np.random.default_rng(0)
    qkv = torch.tensor(rng.standard_normal((ATTENTION_BATCH, steps, 3 * HEADS * HEAD_WIDTH)).astype(np.float32),
                       requires_grad=True)
    seed = torch.tensor(rng.standard_normal((ATTENTION_BATCH, steps, HEADS * HEAD_WIDTH)).astype(np.float32))

    def step(_):
        qkv.grad = None
        packed_sdpa(qkv, HEADS).backward(seed)

    return step


#: What a call's time is read from: the wall clock, or with ``--cpu-time`` the process's CPU time, which other
#: processes on a shared machine move far less (a one-thread process only: it sums every thread's time).
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}


def timed(step, data, iterations, clock=time.perf_counter):
    times = []
    for i in range(iterations):
        t0 = clock()
        step(data[i % len(data)])
        times.append(clock() - t0)
    return statistics.median(times)


def measure(made: dict, data, rounds, iterations, clock=time.perf_counter):
    """Best round median (ms) of each system in ``made`` (name -> factory), after two warm-up calls."""
    steps = {}
    for name, make in made.items():
        try:
            steps[name] = make()
        except ImportError as error:
            print(f"{name}: not measured ({error})")
    for step in steps.values():
        for item in data[:2]:
            step(item)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, step in steps.items():
            best[name] = min(best[name], timed(step, data, iterations, clock))
    return {name: seconds * 1e3 for name, seconds in best.items()}


def _status(field):
    """A field of /proc/self/status in KiB (VmRSS: resident now, VmHWM: its peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_rss_growth(handler_name, steps):
    """KiB the peak RSS rises above the resident size in one forward and backward at ``steps``, after the same
    at T = 128 (longer than one tile: the cpu handler's tiled kernel compiled and loaded, pools started) and a
    reset of the peak (Linux's clear_refs 5, so that importing and compiling do not hide it); run by this script
    in a fresh process."""
    sigma_attention(handler_name, 128)(None)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status("VmRSS")
    sigma_attention(handler_name, steps)(None)
    return _status("VmHWM") - before


def memory(handler_name, steps):
    command = [sys.executable, __file__, "--memory-of", handler_name, str(steps)]
    return int(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds and iterations (a smoke run)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--threads", type=int, help="threads for BLAS, numba and torch alike (default: as the "
                        "environment says)")
    parser.add_argument("--cpu-time", action="store_true", help="time by the process's CPU time, not the wall "
                        "clock: steadier on a loaded machine; needs --threads 1")
    parser.add_argument("--memory-of", nargs=2, metavar=("HANDLER", "T"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_of:
        print(peak_rss_growth(args.memory_of[0], int(args.memory_of[1])))
        return
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time needs --threads 1 (CPU time sums every thread's)")
    clock = CLOCK["cpu" if args.cpu_time else "wall"]
    rounds, iterations = (1, 2) if args.quick else (args.rounds, args.iterations)
    report = {"gpt_step_ms": measure({"cpu": lambda: sigma_gpt("cpu"), "numpy": lambda: sigma_gpt("numpy"),
                                      "torch": torch_gpt_step}, batches(), rounds, iterations, clock),
              "attention_ms": {}, "peak_rss_growth_kib": {}}
    for steps in (64, 256, 1024):
        made = {"cpu": lambda: sigma_attention("cpu", steps), "numpy": lambda: sigma_attention("numpy", steps),
                "torch": lambda: torch_attention(steps)}
        report["attention_ms"][steps] = measure(made, [None], max(1, rounds // 2) if steps > 256 else rounds,
                                                max(2, iterations // 4) if steps > 256 else iterations, clock)
    for name in ("cpu", "numpy"):
        report["peak_rss_growth_kib"][name] = {steps: memory(name, steps) for steps in (256, 1024)}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    step = report["gpt_step_ms"]
    print(f"baby GPT training step (batch {BATCH}, T={CONTEXT}, {LAYERS} blocks of width {WIDTH}, {HEADS} heads, "
          f"float32, AdamW), best of {rounds} round medians, {'CPU time' if args.cpu_time else 'wall clock'}:")
    for name, value in step.items():
        print(f"  {name:6s} {value:8.2f} ms" + (f"  {value / step['torch']:.2f}x torch" if "torch" in step else ""))
    print(f"attention op alone, forward + backward (batch {ATTENTION_BATCH}, {HEADS} heads of {HEAD_WIDTH}), ms:")
    for steps, row in report["attention_ms"].items():
        ratios = "  ".join(f"{n} {v / row['torch']:.2f}x" for n, v in row.items() if n != "torch" and "torch" in row)
        print(f"  T={steps:5d}  " + "  ".join(f"{n} {v:8.2f}" for n, v in row.items()) + f"   ({ratios} torch)")
    width = HEADS * HEAD_WIDTH  # qkv and its gradient (3·width each), the output and its gradient (width each)
    linear = {steps: ATTENTION_BATCH * steps * 8 * width * 4 / 2**20 for steps in (256, 1024)}
    weights = {steps: ATTENTION_BATCH * HEADS * steps * steps * 4 / 2**20 for steps in (256, 1024)}
    print("peak RSS rise of one forward + backward, MiB (the op's inputs, outputs and gradients: "
          f"{linear[256]:.0f} and {linear[1024]:.0f}; one (B, H, T, T) array: {weights[256]:.0f} and "
          f"{weights[1024]:.0f}):")
    for name, row in report["peak_rss_growth_kib"].items():
        print(f"  {name:6s} T=256 {row[256] / 1024:6.1f}  T=1024 {row[1024] / 1024:6.1f}")


if __name__ == "__main__":
    main()

"""Character-LSTM training step (issue 16): Sigma's numpy and cpu handlers against PyTorch eager.

The step: batch 32, T time steps (50 unless said), one-hot inputs over 65
characters, LSTM 256, time-distributed Dense 65, softmax cross-entropy at every
step, SGD (lr 0.1), float32. Measured through the real framework path
(constructs -> Network -> Trainer.run_iteration). Also timed: the step's GEMMs
alone in NumPy (the floor a host implementation can reach), and PyTorch eager
(``nn.LSTM`` + ``nn.Linear`` + ``cross_entropy`` + SGD) on the same cores when
torch is installed ("torch not installed" otherwise), and the same GEMMs through
PyTorch's BLAS (``gemms-torch``): what separates the two floors.

Each figure is the best of ``--rounds`` round medians (``--iterations`` steps
each): the machine this was written on is shared, so the best round is the
least disturbed one. Rounds of the systems alternate. Then the cost of a step
for T = 25, 50, 100, 200 (linear growth expected), and the peak memory of a
step at T = 200 (tracemalloc, which sees NumPy's buffers; the first step of a fresh
trainer, as later ones reuse its pooled buffers, after a warm-up step of another
that loads the compiled kernels) against the activations BPTT must keep: gates,
cell and hidden states, T·B·6·H floats.

With the ``mkl`` wheel installed the ``cpu`` handler is timed twice, ``cpu-mkl``
and ``cpu-openblas`` (``SIGMA_CPU_BLAS`` set as each is created); the ``gemms``
row stays NumPy's OpenBLAS.

Usage: ``python plugins/sigmann-recurrent/benchmarks/recurrent.py [--quick] [--json] [--threads N] [--rounds R]
[--iterations I] [--large | --step-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc

if "--threads" in sys.argv:  # before NumPy, numba and torch start their thread pools
    _threads = sys.argv[sys.argv.index("--threads") + 1]
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_name] = _threads

import numpy as np  # noqa: E402

BATCH, CHARS, SIZE, LR = 32, 65, 256, 0.1


def make_batches(steps, n=4, seed=0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n):
        labels = rng.integers(0, CHARS, size=(BATCH, steps + 1))
        batches.append({"inputs": np.eye(CHARS, dtype=np.float32)[labels[:, :-1]], "targets": labels[:, 1:].copy()})
    return batches


def sigma_step(handler_name, steps):
    from sigma_core import Dense, Input, Network, SoftmaxCE, Trainer, build, create_handler
    from sigmann_recurrent import LSTM

    network = Network(Input(steps, CHARS) + LSTM(SIZE) + Dense(CHARS, time_distributed=True) + SoftmaxCE())
    trainer = Trainer(network, build("optimiser", {"type": "sgd", "learning_rate": LR}), training_iterator=[])
    trainer.initialise(create_handler(handler_name, dtype="float32", seed=0))
    return trainer.run_iteration


def torch_step(steps):
    import torch

    torch.manual_seed(0)
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    lstm, dense = torch.nn.LSTM(CHARS, SIZE, batch_first=True), torch.nn.Linear(SIZE, CHARS)
    optimiser = torch.optim.SGD([*lstm.parameters(), *dense.parameters()], lr=LR)

    def step(batch):
        x, t = torch.from_numpy(batch["inputs"]), torch.from_numpy(batch["targets"])
        optimiser.zero_grad()
        logits = dense(lstm(x)[0])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, CHARS), t.reshape(-1))
        loss.backward()
        optimiser.step()
        return loss

    return step


def gemm_step(steps, library="numpy"):
    """The step's matrix products alone, with preallocated outputs: NumPy's BLAS (OpenBLAS in NumPy's wheels),
    or with ``library="torch"`` the same products through ``torch.matmul`` (PyTorch's BLAS, MKL or oneDNN)."""
    rng = np.random.default_rng(0)
    if library == "torch":
        import torch

        def f32(*shape):
            return torch.from_numpy((0.05 * rng.standard_normal(shape)).astype(np.float32))

        matmul = torch.matmul
    else:
        def f32(*shape):
            return (0.05 * rng.standard_normal(shape)).astype(np.float32)  # small: no overflow

        matmul = np.matmul
    rows, width = BATCH * steps, 4 * SIZE
    x, w, u, v = f32(rows, CHARS), f32(CHARS, width), f32(SIZE, width), f32(SIZE, CHARS)
    gates, hs, h, logits = f32(rows, width), f32(rows, SIZE), f32(BATCH, SIZE), f32(rows, CHARS)
    dx, dw, du, dv, dhs = f32(rows, CHARS), f32(CHARS, width), f32(SIZE, width), f32(SIZE, CHARS), f32(rows, SIZE)

    def step(batch):
        matmul(x, w, out=gates)  # input projection, all steps
        for t in range(1, steps):  # recurrent products, forward and backward
            matmul(hs[(t - 1) * BATCH : t * BATCH], u, out=gates[t * BATCH : (t + 1) * BATCH])
            matmul(gates[t * BATCH : (t + 1) * BATCH], u.T, out=h)
        matmul(hs, v, out=logits)
        matmul(logits, v.T, out=dhs)
        matmul(hs.T, logits, out=dv)
        matmul(x.T, gates, out=dw)
        matmul(hs.T, gates, out=du)
        matmul(gates, w.T, out=dx)

    return step


def timed(step, batches, iterations):
    times = []
    for i in range(iterations):
        t0 = time.perf_counter()
        step(batches[i % len(batches)])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def provider_step(provider, steps):
    """The cpu handler's step with its GEMMs from ``provider`` (the choice is made as the handler is created)."""
    before = os.environ.get("SIGMA_CPU_BLAS")
    os.environ["SIGMA_CPU_BLAS"] = provider
    try:
        return sigma_step("cpu", steps)
    finally:
        if before is None:
            del os.environ["SIGMA_CPU_BLAS"]
        else:
            os.environ["SIGMA_CPU_BLAS"] = before


def cpu_systems(steps):
    """``cpu`` as ``auto`` picks its provider; with the mkl wheel installed, ``cpu-mkl`` and ``cpu-openblas``
    side by side instead, so one run compares the providers."""
    from sigma_cpu import blas

    if blas.mkl_library() is None:
        return {"cpu": lambda: sigma_step("cpu", steps)}
    return {f"cpu-{provider}": (lambda provider=provider: provider_step(provider, steps))
            for provider in ("mkl", "openblas")}


def systems(steps):
    made = {"numpy": lambda: sigma_step("numpy", steps), **cpu_systems(steps),
            "gemms": lambda: gemm_step(steps), "torch": lambda: torch_step(steps),
            "gemms-torch": lambda: gemm_step(steps, "torch")}
    out = {}
    for name, make in made.items():
        try:
            out[name] = make()
        except ImportError as error:
            print(f"{name}: {'torch not installed' if name.endswith('torch') else error}")
    return out


def measure(steps, rounds, iterations):
    batches = make_batches(steps)
    steps_by_name = systems(steps)
    for step in steps_by_name.values():  # warm-up: compilation, buffer pools
        for b in batches[:2]:
            step(b)
    best = {name: float("inf") for name in steps_by_name}
    for _ in range(rounds):
        for name, step in steps_by_name.items():
            best[name] = min(best[name], timed(step, batches, iterations))
    return {name: ms * 1e3 for name, ms in best.items()}


def peak_memory(handler_name, steps):
    """Peak bytes allocated by a step (the first of a fresh trainer: later ones reuse its pooled buffers), and
    the bytes of the activations BPTT must keep. A step of another trainer runs first, so that loading compiled
    kernels (Python objects tracemalloc would count) is not part of the figure."""
    batches = make_batches(steps, n=1)
    sigma_step(handler_name, steps)(batches[0])
    step = sigma_step(handler_name, steps)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    step(batches[0])
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak, steps * BATCH * 6 * SIZE * 4


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds and iterations (a smoke run)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--threads", type=int, help="threads for BLAS, numba and torch alike (default: as the environment says)")
    parser.add_argument("--large", action="store_true",
                        help="the step at batch 64, T=100, LSTM 512 only (no scaling or memory figures)")
    parser.add_argument("--step-only", action="store_true", help="the step at T=50 only (no scaling or memory figures)")
    args = parser.parse_args(argv)
    rounds, iterations = (1, 2) if args.quick else (args.rounds, args.iterations)
    global BATCH, SIZE
    steps = 50
    if args.large:
        BATCH, SIZE, steps = 64, 512, 100
    report = {"step_ms": measure(steps, rounds, iterations), "scaling_ms": {}, "peak_memory": {}}
    brief = args.large or args.step_only
    for steps_here in () if brief else (25, 50, 100, 200):
        report["scaling_ms"][steps_here] = measure(steps_here, max(1, rounds // 2), max(2, iterations // 2))
    for name in () if brief else ("numpy", "cpu"):
        peak, activations = peak_memory(name, 200)
        report["peak_memory"][name] = {"peak_mib": peak / 2**20, "activations_mib": activations / 2**20,
                                       "ratio": peak / activations}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    ms = report["step_ms"]
    print(f"character LSTM step (batch {BATCH}, T={steps}, {CHARS} chars, LSTM {SIZE}, float32), "
          f"best of {rounds} round medians:")
    for name, value in ms.items():
        extra = f"  {value / ms['torch']:.2f}x torch" if "torch" in ms and name != "torch" else ""
        extra += f"  {value / ms['gemms']:.2f}x GEMMs" if name.startswith(("numpy", "cpu", "gemms-torch")) else ""
        print(f"  {name:6s} {value:8.2f} ms{extra}")
    if report["scaling_ms"]:
        print("scaling (ms per step):")
    for steps, row in report["scaling_ms"].items():
        print(f"  T={steps:3d}  " + "  ".join(f"{n} {v:7.2f}" for n, v in row.items()))
    for name, row in report["peak_memory"].items():
        print(f"peak memory at T=200 ({name}): {row['peak_mib']:.1f} MiB, activations {row['activations_mib']:.1f} MiB, "
              f"ratio {row['ratio']:.2f}")


if __name__ == "__main__":
    main()

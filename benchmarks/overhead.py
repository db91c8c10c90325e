"""Framework overhead: one Sigma training iteration against a hand-written NumPy loop.

Two workloads run through the real framework path (constructs -> Network ->
Trainer.run_iteration on the numpy handler, Gaussian initialisers, a real
optimiser) and, in the same process, as plain NumPy code of the kind a
competent NumPy programmer writes (preallocated buffers, ``out=`` everywhere,
inverted dropout masks from a NumPy Generator, numerically stable softmax
cross-entropy):

* ``mnist-mlp``: 784 (Input(28, 28)) -> Dropout 0.2 -> Dense 1000 relu ->
  Dropout 0.4 -> Dense 800 relu -> Dropout 0.4 -> Dense 10 -> SoftmaxCE,
  Adagrad lr 0.02 eps 1e-6, batch 100, float32 (Sigma's MNIST example).
* ``small-mlp``: 784 -> Dense 128 relu -> Dense 10 -> SoftmaxCE, SGD lr 0.1,
  batch 100, float32, no dropout; here per-op overhead weighs the most.

Data is synthetic and MNIST-shaped (floats in [0, 1), labels 0-9), a few
distinct batches cycled. Before timing, both implementations are checked to
compute the same thing: from Sigma's initial parameters (``state_dict``) and
the same dropout random stream, the first iterations' losses must agree
within 1e-4 and the parameters after them closely.

Rounds alternate (sigma, numpy, sigma, numpy, ...) so that drift in machine
load hits both systems alike; every iteration is timed on its own and the
median over all timed iterations is reported, with the spread of per-round
medians. Thread settings (BLAS threads) are left as the environment has them.

Usage: ``python benchmarks/overhead.py [--quick] [--json]``; exits 1 when a
sigma/hand-written ratio is over the 1.3x target (never with ``--quick``).
The trainer, NumPy loop and timer are ``sigma bench``'s: install
``plugins/sigmann-bench`` (requirements-dev.txt does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

from sigmann_bench.bench import build_hand, build_trainer, dense_parameters, make_batches, time_round

TARGET_RATIO = 1.3

WORKLOADS = {
    # hidden layers as (size, dropout before it); the output layer (10, linear) follows
    "mnist-mlp": dict(
        dropouts=(0.2, 0.4, 0.4),
        hidden=(1000, 800),
        optimiser="adagrad",
        lr=0.02,
        rounds=5,
        iterations=50,
    ),
    "small-mlp": dict(dropouts=(0.0, 0.0), hidden=(128,), optimiser="sgd", lr=0.1, rounds=10, iterations=100),
}


# -- Sigma ----------------------------------------------------------------------------------
# -- checks and timing ----------------------------------------------------------------------------
def check_agreement(name, spec, batches, steps=3, tolerance=1e-4):
    """Same start, same dropout stream: losses within ``tolerance``, parameters close."""
    trainer = build_trainer(spec, "numpy")
    rng_state = trainer.handler.kernels.rng.bit_generator.state  # the dropout stream, from here on
    hand = build_hand(spec, trainer, rng_state)
    worst = 0.0
    for i in range(steps):
        batch = batches[i % len(batches)]
        s = float(trainer.run_iteration(batch))
        n = hand.step(batch["inputs"], batch["targets"])
        worst = max(worst, abs(s - n))
        assert abs(s - n) <= tolerance, f"{name}: iteration {i + 1} loss sigma {s!r} vs hand-written {n!r}"
    param_diff = 0.0
    for (w, b), hw, hb in zip(dense_parameters(trainer), hand.W, hand.b):
        param_diff = max(param_diff, float(np.abs(w - hw).max()), float(np.abs(b - hb).max()))
    assert param_diff <= 1e-3, f"{name}: parameters differ by {param_diff} after {steps} iterations"
    return worst, param_diff


def bench(spec, batches, rounds, iterations, warmup):
    trainer = build_trainer(spec, "numpy")
    hand = build_hand(spec, trainer)
    systems = {
        "sigma": lambda batch: trainer.run_iteration(batch),
        "numpy": lambda batch: hand.step(batch["inputs"], batch["targets"]),
    }
    for step in systems.values():
        time_round(step, batches, 0, warmup)
    samples = {s: [] for s in systems}
    round_medians = {s: [] for s in systems}
    for r in range(rounds):
        for system, step in systems.items():
            times = time_round(step, batches, r * iterations, iterations)
            samples[system].extend(times)
            round_medians[system].append(statistics.median(times))
    return {
        system: (statistics.median(samples[system]) * 1e3, min(round_medians[system]) * 1e3, max(round_medians[system]) * 1e3)
        for system in systems
    }


def blas_name() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older NumPy: no dict mode
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations, for a smoke test")
    parser.add_argument("--json", action="store_true", help="print the results as JSON records")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append", help="run only these workloads")
    args = parser.parse_args()

    info = sys.stderr if args.json else sys.stdout
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    print(f"numpy {np.__version__}, BLAS {blas_name()}, {os.cpu_count()} CPUs ({usable} usable), "
          f"thread settings untouched", file=info)

    batches = make_batches()
    records = []
    for name in args.workload or list(WORKLOADS):
        spec = dict(WORKLOADS[name], name=name)
        loss_diff, param_diff = check_agreement(name, spec, batches)
        print(f"{name}: sigma and hand-written agree (3 iterations: loss diff {loss_diff:.1e}, "
              f"parameter diff {param_diff:.1e})", file=info)
        rounds, iterations, warmup = (2, 10, 3) if args.quick else (spec["rounds"], spec["iterations"], 10)
        results = bench(spec, batches, rounds, iterations, warmup)
        baseline = results["numpy"][0]
        for system, (median, low, high) in results.items():
            records.append(
                {
                    "workload": name,
                    "system": system,
                    "median_ms": round(median, 4),
                    "min_ms": round(low, 4),
                    "max_ms": round(high, 4),
                    "ratio": round(median / baseline, 3),
                }
            )
        print(f"{name}: {rounds} rounds x {iterations} iterations per system timed", file=info)

    if args.json:
        print(json.dumps(records, indent=2))
    else:
        print(f"\n{'workload':<12}{'system':<8}{'median ms':>11}{'round medians (min-max)':>26}{'ratio':>8}")
        for r in records:
            spread = f"{r['min_ms']:.3f}-{r['max_ms']:.3f}"
            print(f"{r['workload']:<12}{r['system']:<8}{r['median_ms']:>11.3f}{spread:>26}{r['ratio']:>7.2f}x")
    over = [r for r in records if r["system"] == "sigma" and r["ratio"] > TARGET_RATIO]
    for r in records:
        if r["system"] == "sigma":
            verdict = "OVER" if r in over else "within"
            print(f"{r['workload']}: sigma/hand-written {r['ratio']:.2f}x, {verdict} the {TARGET_RATIO}x target", file=info)
    return 1 if over and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())

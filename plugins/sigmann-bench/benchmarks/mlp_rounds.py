"""The MLP workloads' ``cpu`` step against its GEMMs and the hand-written NumPy loop, as per-round ratios in one process.

``sigma bench`` times each system in its own process and reports medians; on a
machine other programs load, those medians move by several times between runs.
Here the replayed ``cpu`` step, ``gemms-only`` (the step's products alone in
NumPy's BLAS) and the hand-written NumPy loop (:class:`sigmann_bench.bench.HandMLP`)
alternate round by round in one process, and each round's ratio is taken between
neighbours in time. For a before/after comparison run it alternately under two
checkouts' interpreters; one thread each is the setting a loaded machine can measure:

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 MKL_NUM_THREADS=1 \\
        python plugins/sigmann-bench/benchmarks/mlp_rounds.py --workload small-mlp --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import time

from sigmann_bench.bench import WORKLOADS, GemmsOnly, build_hand, build_trainer, dense_parameters, make_batches


def spread(values) -> str:
    return f"{min(values):.3f}-{statistics.median(values):.3f}-{max(values):.3f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="small-mlp", choices=["small-mlp", "sigma-mlp"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--iterations", type=int, help="steps per round per system (200 small-mlp, 20 sigma-mlp)")
    args = parser.parse_args(argv)
    spec = dict(WORKLOADS[args.workload], name=args.workload)
    iterations = args.iterations or (200 if args.workload == "small-mlp" else 20)
    trainer, batches = build_trainer(spec, "cpu"), make_batches()
    for i in range(20):  # compilation, buffer pools, recording
        trainer.run_iteration(batches[i % len(batches)])
    gemms, loop = GemmsOnly(dense_parameters(trainer)), build_hand(spec, trainer)
    steps = {"sigma-cpu": trainer.run_iteration, "gemms-only": lambda b: gemms.step(b["inputs"], None),
             "numpy-loop": lambda b: loop.step(b["inputs"], b["targets"])}
    rounds = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            for i in range(3):
                step(batches[i])
            start = time.perf_counter()
            for i in range(iterations):
                step(batches[i % len(batches)])
            rounds[name].append((time.perf_counter() - start) / iterations * 1e3)
    print(f"{args.workload} (BLAS: {trainer.handler.kernels.provider}), ms per step:")
    for name, values in rounds.items():
        print(f"  {name:11s} median {statistics.median(values):7.3f}, best round {min(values):7.3f}")
    for name in ("gemms-only", "numpy-loop"):
        ratios = [a / b for a, b in zip(rounds["sigma-cpu"], rounds[name])]
        print(f"  sigma-cpu / {name} per round, min-median-max: {spread(ratios)}")
    ratios = [a / b for a, b in zip(rounds["gemms-only"], rounds["numpy-loop"])]
    print(f"  gemms-only / numpy-loop per round (the floor), min-median-max: {spread(ratios)}")


if __name__ == "__main__":
    main()

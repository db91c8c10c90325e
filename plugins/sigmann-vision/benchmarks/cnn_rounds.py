"""The MNIST CNN step (``sigma bench --workloads cnn``'s workload) as per-round ratios, every system in one process.

``sigma bench`` times each system in its own process and reports medians; on a
machine other programs load, those medians move by several times between
rounds. Here ``sigma-cpu``, ``pytorch-eager`` and ``gemms-only`` (the systems of
:mod:`sigmann_vision.bench`) alternate round by round in one process, and each
round's ratio is taken between neighbours in time: what the load does to one
round it does to the ratio less. One thread each is the setting where sharing a
process is fair (two OpenMP pools would spin against each other):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c 1 \\
        python plugins/sigmann-vision/benchmarks/cnn_rounds.py --rounds 15 --iterations 6
"""

from __future__ import annotations

import argparse
import statistics
import time

from sigmann_vision import bench

SYSTEMS = ("sigma-cpu", "pytorch-eager", "gemms-only")


def spread(values) -> str:
    return f"{min(values):.2f}-{statistics.median(values):.2f}-{max(values):.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--iterations", type=int, default=6, help="steps per round per system (their median counts)")
    args = parser.parse_args(argv)
    batches = bench.make_batches()
    steps = {name: bench.make_step(name) for name in SYSTEMS}
    for step in steps.values():  # compilation, buffer pools, recording
        for batch in batches[:3]:
            step(batch)
    rounds = {name: [] for name in SYSTEMS}
    for _ in range(args.rounds):
        for name, step in steps.items():
            times = []
            for i in range(args.iterations):
                start = time.perf_counter()
                step(batches[i % len(batches)])
                times.append(time.perf_counter() - start)
            rounds[name].append(statistics.median(times) * 1e3)
    for name, values in rounds.items():
        print(f"{name:14s} median {statistics.median(values):8.2f} ms, best round {min(values):8.2f} ms")
    ours = rounds["sigma-cpu"]
    for name in SYSTEMS[1:]:
        ratios = [a / b for a, b in zip(ours, rounds[name])]
        print(f"sigma-cpu / {name} per round, min-median-max: {spread(ratios)}")


if __name__ == "__main__":
    main()

"""Where a recorded ``cpu`` training step spends its time beyond its GEMMs: each replayed call alone, then together.

Issue 28 asks how far the MLPs' steps are from the GEMM floor. ``sigma bench``'s
``gemms-only`` baseline runs the step's matrix products on inputs that never
change, so they stay in cache. This times, for one ``sigma bench`` workload on
the ``cpu`` handler with its steps replayed (sigmann-replay):

* every call of the recorded step run alone, many times over (warm caches), and their sum;
* the whole step on the same batch every time, and on the workload's rotating batches (as ``sigma bench`` does);
* ``sigma bench``'s ``gemms-only`` step on the handler's provider (``SIGMA_CPU_BLAS`` chooses it, see
  :mod:`sigma_cpu.blas`).

Medians of rounds; ratios against ``gemms-only`` measured in the same run.

Usage: ``python benchmarks/step_anatomy.py [--workload small-mlp|sigma-mlp] [--calls N]``
"""

import argparse
import statistics
import time

from sigmann_bench.bench import WORKLOADS, GemmsOnly, build_trainer, dense_parameters, make_batches
from sigmann_replay import StepReplay


def median_us(call, count: int, rounds: int = 7) -> float:
    """Median over ``rounds`` of the mean µs per call of ``count`` calls (``call`` gets the call's index)."""
    for i in range(max(10, count // 20)):
        call(i)
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(count):
            call(i)
        results.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(results)


def name_of(call) -> str:
    function = getattr(call, "func", call)
    return getattr(function, "__name__", type(function).__name__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="small-mlp", choices=["small-mlp", "sigma-mlp"])
    parser.add_argument("--calls", type=int, default=1000, help="calls per round (a tenth for sigma-mlp)")
    args = parser.parse_args()
    count = args.calls if args.workload == "small-mlp" else max(args.calls // 10, 20)
    trainer = build_trainer(dict(WORKLOADS[args.workload], name=args.workload), "cpu")
    batches = make_batches()
    for i in range(20):
        trainer.run_iteration(batches[i % len(batches)])
    replay = StepReplay.of(trainer)
    if replay is None or replay.last is None:
        raise SystemExit("step_anatomy: the steps are not replayed (is sigmann-replay installed?)")
    forward, backward = replay.last.run_calls
    alone = [(part, name_of(call), median_us(lambda i, c=call: c(), count))
             for part, calls in (("forward", forward), ("backward", backward)) for call in calls]
    provider = trainer.handler.kernels.provider  # sigma_cpu.blas: the floor is this provider's GEMMs
    gemms = GemmsOnly(dense_parameters(trainer), batches[0]["inputs"].shape[0], "mkl" if provider == "mkl" else "numpy")
    floor = median_us(lambda i: gemms.step(batches[i % len(batches)]["inputs"], None), count)
    same = median_us(lambda i: trainer.run_iteration(batches[0]), count)
    rotating = median_us(lambda i: trainer.run_iteration(batches[i % len(batches)]), count)
    print(f"{args.workload} on cpu (BLAS: {provider}), recorded step, {len(batches)} rotating batches; "
          "µs (x gemms-only):")
    for part, name, us in alone:
        print(f"  {part:<9}{name:<32}{us:9.2f}")
    total = sum(us for _, _, us in alone)
    for label, us in (("every call alone, summed", total), ("step, same batch each time", same),
                      ("step, rotating batches", rotating), ("gemms-only", floor)):
        print(f"  {label:<41}{us:9.2f}  ({us / floor:.2f}x)")


if __name__ == "__main__":
    main()

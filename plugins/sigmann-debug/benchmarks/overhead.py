"""What the debug handler costs: the MNIST MLP's training step on ``debug:HANDLER`` against ``HANDLER``, in one process.

Run ``python plugins/sigmann-debug/benchmarks/overhead.py [HANDLER] [WORKLOAD] [ROUNDS]`` (needs sigmann-bench).
Rounds alternate between the three systems, run back to back on the same batches: the handler as ``sigma train``
runs it (recorded steps replayed), the handler with every step as written (what the debug handler runs: it turns
replay off), and ``debug:HANDLER``. Printed: the machine, each one's median and minimum of the round medians (ms per
step) and the debug handler's ratios to each of the other two (the minimums: the least disturbed by a busy machine);
the issue's bound is 3x.
"""

import argparse
import statistics

from sigmann_bench import bench


def main(handler="cpu", workload="sigma-mlp", rounds=10):
    spec = dict(bench.WORKLOADS[workload], name=workload)
    batches = bench.make_batches(n=5, batch=spec.get("batch", bench.BATCH))
    systems = {f"{handler} (replayed)": bench.build_trainer(spec, handler).run_iteration,
               f"{handler} (as written)": bench.build_trainer(spec, handler, replay=False).run_iteration,
               f"debug:{handler}": bench.build_trainer(spec, f"debug:{handler}").run_iteration}
    results = {name: [] for name in systems}
    for index in range(rounds):
        for name, step in systems.items():
            bench.time_round(step, batches, 0, 3)  # warm-up
            results[name].append(statistics.median(bench.time_round(step, batches, index, 20)) * 1e3)
    print(bench.machine())
    medians = {name: statistics.median(times) for name, times in results.items()}
    for name, times in results.items():
        print(f"{name:22s} median {medians[name]:8.2f} ms  min {min(times):8.2f} ms")
    debug = f"debug:{handler}"
    for name in list(systems)[:2]:
        print(f"{debug} / {name}: {medians[debug] / medians[name]:.2f}x (medians), "
              f"{min(results[debug]) / min(results[name]):.2f}x (minimums)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("handler", nargs="?", default="cpu", help="the handler to wrap (default: cpu)")
    parser.add_argument("workload", nargs="?", default="sigma-mlp", choices=sorted(bench.WORKLOADS))
    parser.add_argument("rounds", nargs="?", default=10, type=int, help="rounds of every system (default: 10)")
    arguments = parser.parse_args()
    main(arguments.handler, arguments.workload, arguments.rounds)

"""Replayed against unrecorded training steps, in one process:
``python plugins/sigmann-replay/benchmarks/replay.py HANDLER WORKLOAD [ROUNDS]`` (needs sigmann-bench).

WORKLOAD is one of ``sigma bench``'s (sigma-mlp, small-mlp, probe). Rounds alternate between
replay on, replay off, the hand-written NumPy loop, the GEMMs alone and (on a host handler) the
recorded calls alone, run back to back on the recording's buffers; printed: the median and
minimum of the round medians (µs per step) and each one's ratio to the loop, then the framework
time (replay on less the GEMMs alone: what Sigma adds to the arithmetic a hand-written step must
do, the compiled loops' own arithmetic included) and the replay's bookkeeping (replay on less the
recorded calls alone).
"""

import argparse
import statistics
import time

from sigmann_bench import bench
from sigmann_replay import StepReplay


def main(handler="cpu", workload="small-mlp", rounds=20):
    spec = dict(bench.WORKLOADS[workload], name=workload)
    batch = spec.get("batch", bench.BATCH)
    batches = bench.make_batches(n=5, batch=batch)
    reference = bench.build_trainer(spec, "numpy")
    hand = bench.build_hand(spec, reference)
    gemms = bench.GemmsOnly(bench.dense_parameters(reference), batch)
    on = bench.build_trainer(spec, handler, replay=False)
    on.compile_step(StepReplay.compile)
    replay = StepReplay.of(on)
    systems = {"replay on": on.run_iteration,
               "replay off": bench.build_trainer(spec, handler, replay=False).run_iteration,
               "numpy loop": lambda b: hand.step(b["inputs"], b["targets"]),
               "gemms only": lambda b: gemms.step(b["inputs"], b["targets"]),
               "calls only": lambda b: [call() for part in replay.last.run_calls for call in part]}
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
    medians = {name: statistics.median(times) for name, times in results.items()}
    for name, times in results.items():
        print(f"{name:11s} median {medians[name]:9.1f} us  min {min(times):9.1f} us  {medians[name] / loop:.2f}x the loop")
    if replay.last.captured is None:
        print(f"framework time {medians['replay on'] - medians['gemms only']:.1f} us, replay bookkeeping "
              f"{medians['replay on'] - medians['calls only']:.1f} us (medians)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("handler", nargs="?", default="cpu", help="the handler to replay on (default: cpu)")
    parser.add_argument("workload", nargs="?", default="small-mlp", choices=sorted(bench.WORKLOADS))
    parser.add_argument("rounds", nargs="?", default=20, type=int, help="rounds of every system (default: 20)")
    arguments = parser.parse_args()
    main(arguments.handler, arguments.workload, arguments.rounds)

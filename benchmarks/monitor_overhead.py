"""What watching a run costs: training time with threaded hooks attached, against none.

The workload is a small MLP on synthetic digits-shaped data (6,000 records of
64 features, 10 classes; 64 -> Dense 256 relu -> Dense 10, Adam, batch 32,
3 epochs: ~420 iterations of a fraction of a millisecond, where per-event
costs weigh the most) on the fastest handler installed, or ``--handler``.
Configurations:

* ``none``: no hook;
* ``slow``: a threaded hook that sleeps 1 s in every event, sent every
  iteration (the issue's "blocks 1 s per event"): it falls behind at once,
  so this measures queueing and dropping;
* ``busy``: a threaded hook that computes in Python for 1 s in every event
  (issue 24's slow hook): its thread wants the interpreter lock the whole
  time, so this measures how well the hook thread's throttle keeps it to its
  ``share`` (:class:`sigma_core.hooks.dispatch.Throttle`);
* ``busy, share = 1``: the same hook unthrottled, as every threaded hook was
  before issue 24;
* ``metrics``: the core's metrics hook (every 10 iterations, files in a
  temporary directory);
* ``metrics+tensorboard``: plus sigmann-tensorboard, histograms included
  (which turns on the optimiser's update publishing), when installed.

Times are the loop's training seconds (``Loop.seconds``),
which stop when training does: a threaded hook may still be working
through its queue afterwards (for ``slow`` the wait is cut to 0.1 s). Each
round runs every configuration once, in a rotating order, so that drift in
machine load hits all alike. Each configuration's best and median time over
the rounds are reported, with the ratio of its best to ``none``'s: other
processes only ever add time, so on a shared machine the best is the
steadiest figure.

Usage: ``python benchmarks/monitor_overhead.py [--rounds N] [--handler NAME] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time

from sigma_core import Hook
from sigmann_monitors import MetricsHook
from sigma_core import config as run_config
from sigma_core.training.loop import Loop
from sigma_core.run import build_run

RUN = {
    "name": "overhead", "seed": 0,
    "data": {"extractor": "synthetic", "n": 6000, "shape": 64, "classes": 10},
    "split": {"validation": 0.25},
    "network": {"layers": [{"type": "input", "shape": [64]}, {"type": "dense", "size": 256, "activation": "relu"},
                           {"type": "dense", "size": 10}, {"type": "softmax_ce"}]},
    "optimiser": {"type": "adam", "learning_rate": 0.001},
    "training": {"batch_size": 32, "epochs": 3, "prefetch": 0},
}


class Slow(Hook):
    """Blocks its thread for a second per event."""

    name, threaded, drain_seconds = "slow", True, 0.1

    def on_iteration(self):
        time.sleep(1.0)

    def on_epoch(self, report):
        time.sleep(1.0)


class Busy(Slow):
    """Computes in Python for a second per event (a busy loop: what holds the interpreter lock)."""

    name = "busy"
    ended = False  # set once the run has ended: its last event stops, not to weigh on the next configuration

    def __init__(self, share: float | None = None):
        if share is not None:  # else the default, Hook.share
            self.share = share

    def on_iteration(self):
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end and not self.ended:
            pass

    def on_epoch(self, report):
        self.on_iteration()


def configurations(directory: str) -> dict:
    found = {"none": lambda: [], "slow": lambda: [Slow()], "busy": lambda: [Busy()],
             "busy, share = 1": lambda: [Busy(share=1)],
             "metrics": lambda: [MetricsHook(directory=f"{directory}/m")]}
    try:
        from sigmann_tensorboard.hook import TensorBoardHook
    except ImportError:
        return found
    found["metrics+tensorboard"] = lambda: [MetricsHook(directory=f"{directory}/t"),
                                            TensorBoardHook(directory=f"{directory}/t")]
    return found


def seconds(hooks: list, handler: str = "auto") -> tuple[float, str]:
    """Training seconds with ``hooks``, and the handler they were taken on."""
    run = build_run(run_config.validate({**RUN, "handler": {"name": handler}}))
    run.trainer.initialise(run.handler)
    loop = Loop(run.trainer, epochs=RUN["training"]["epochs"], hooks=hooks)
    loop.run()
    for hook in hooks:
        hook.ended = True
    return loop.seconds, run.handler.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--handler", default="auto", help="handler to train on (default: the fastest installed)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("sigma").setLevel(logging.ERROR)  # the slow hook's drop and drain warnings
    with tempfile.TemporaryDirectory() as directory:
        configs = configurations(directory)
        _, handler = seconds([], args.handler)  # warm-up: kernel compilation, imports
        times = {name: [] for name in configs}
        names = list(configs)
        for round_ in range(args.rounds):  # each round in another order: no configuration always goes first
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                times[name].append(seconds(configs[name](), args.handler)[0])
    rows = [{"hooks": name, "handler": handler, "best": round(min(values), 4),
             "median": round(statistics.median(values), 4), "ratio": round(min(values) / min(times["none"]), 3)}
            for name, values in times.items()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'hooks':<22}{'best s':>8}{'median s':>10}{'best vs none':>14}   ({handler} handler, {args.rounds} rounds)")
    for row in rows:
        print(f"{row['hooks']:<22}{row['best']:>8.3f}{row['median']:>10.3f}{row['ratio']:>14.3f}")


if __name__ == "__main__":
    main()

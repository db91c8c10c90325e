"""What a misbehaving threaded hook costs the digits run (issue 37 item 2): slow, blocked, or a remote logger down.

The run is ``examples/digits.toml`` (20 epochs of 45 iterations of about a quarter of a millisecond each, where
any per-event cost weighs the most; ``--epochs`` changes it), trained as ``sigma train`` trains it
(:func:`sigma_core.build_run`, in a temporary folder). Configurations:

* ``none``: no hook;
* ``slow``: a threaded hook that takes 50 ms per event, sent every iteration: it falls behind at once (45 s of
  work for the whole run), every event waits for it (in memory, then in its spool file), and the end of the run
  waits its ``drain_seconds`` (10 s) for it;
* ``blocked``: a threaded hook that blocks in ``on_start`` for good;
* ``mlflow down``: sigmann-mlflow at ``tracking_uri = "http://127.0.0.1:1"`` (nothing listens there), every 10.

For each, two times: ``training``, the loop's training seconds (``Loop.seconds``, from the first event to the
last, which a hook must not stretch), and ``whole``, the whole ``Run.train`` call: also the end's wait for the
hooks (at most a hook's ``drain_seconds``, 10 s by default; MLflow's ``wait``) and, for MLflow, its import when
it attaches. Each round runs every configuration once, in a rotating order, so that drift in machine load hits
all alike. Reported: the best and the median training time over the rounds with their ratios to ``none``'s (other
processes only ever add time, so on a shared machine the best is the steadiest figure), and the median whole time.

Usage: ``python benchmarks/monitor_stress.py [--rounds N] [--epochs N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from sigma_core import Hook, build_run
from sigma_core import config as run_config

RUN_FILE = Path(__file__).resolve().parents[1] / "examples" / "digits.toml"


class Slow(Hook):
    """Takes 50 ms per event (waiting, as a slow disk or network does)."""

    name, threaded = "slow", True

    def on_iteration(self):
        time.sleep(0.05)

    def on_epoch(self, report):
        time.sleep(0.05)


class Blocked(Hook):
    """Blocks its thread in ``on_start`` until the benchmark ends."""

    name, threaded = "blocked", True
    released = threading.Event()

    def on_start(self):
        self.released.wait()

    def on_iteration(self):
        pass


def configurations() -> dict:
    from sigmann_mlflow.hook import MlflowHook

    return {"none": list, "slow": lambda: [Slow()], "blocked": lambda: [Blocked()],
            "mlflow down": lambda: [MlflowHook(tracking_uri="http://127.0.0.1:1", artifacts=False)]}


def times(hooks: list, epochs: int) -> tuple[float, float]:
    """(training seconds, seconds of the whole train call) of the digits run with ``hooks``."""
    run = build_run(run_config.load(RUN_FILE, [f"training.epochs={epochs}"]))
    started = time.perf_counter()
    run.train(hooks)
    return run.loop.seconds, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("sigma").setLevel(logging.ERROR)  # the hooks' drain and delivery warnings
    configs = configurations()
    measured = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # the run directories, runs/digits/version_N
        times([], args.epochs)  # warm-up: imports, kernel compilation, the data set's first load
        names = list(configs)
        for round_ in range(args.rounds):  # each round in another order: no configuration always goes first
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                measured[name].append(times(configs[name](), args.epochs))
    Blocked.released.set()
    def figures(name):  # best training, median training, median whole
        training, whole = zip(*measured[name])
        return min(training), statistics.median(training), statistics.median(whole)

    base = figures("none")
    rows = [{"hooks": name, **{key: round(value, 3) for key, value in zip(("best_s", "median_s", "whole_s"), mine)},
             **{f"{key}_ratio": round(value / base[i], 3) for i, (key, value) in
                enumerate(zip(("best", "median", "whole"), mine))}}
            for name in measured for mine in [figures(name)]]
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"rounds": args.rounds, "epochs": args.epochs, "load": load, "rows": rows}, indent=2))
        return
    print(f"{'hooks':<14}{'best s':>8}{'vs none':>9}{'median s':>10}{'vs none':>9}{'whole s':>9}{'vs none':>9}   "
          f"(digits, {args.epochs} epochs, {args.rounds} rounds; load average {load:.1f})")
    for row in rows:
        print(f"{row['hooks']:<14}{row['best_s']:>8.3f}{row['best_ratio']:>9.3f}{row['median_s']:>10.3f}"
              f"{row['median_ratio']:>9.3f}{row['whole_s']:>9.2f}{row['whole_ratio']:>9.1f}")


if __name__ == "__main__":
    main()

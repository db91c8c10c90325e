"""What a misbehaving threaded hook costs a run (issue 37 item 2: within 1.15x of the run without it).

Runs: ``digits`` (``examples/digits.toml``, 20 epochs of 45 iterations of a fraction of a millisecond each, where
any per-event cost weighs the most) and ``mnist`` (``examples/mnist.toml``, 2 epochs of 80 iterations of the
784-1000-800-10 MLP, on the official test set's files in ``--mnist-data``), each trained as ``sigma train`` trains
it (:func:`sigma_core.build_run`, ``Run.train``) in a temporary folder. Hooks:

* ``none``: no hook;
* ``slow``: a threaded hook that takes 50 ms per event (waiting, as a slow disk or network does), sent every
  iteration: it falls behind at once and every event waits for it (in memory, then in its spool file);
* ``blocked``: a threaded hook blocked in ``on_start`` for good;
* ``failing``: a threaded hook that raises in its first ``on_iteration`` (named in one line and detached);
* ``mlflow down``: sigmann-mlflow at ``tracking_uri = "http://127.0.0.1:1"`` (nothing listens there), every 10;
* ``mlflow silent``: sigmann-mlflow at a port that accepts connections and never answers (a hung server).

Two times each: ``training``, the loop's seconds (``Loop.seconds``, from the hooks' attaching to the last event:
what a hook must not stretch), and ``whole``, the whole ``Run.train`` call, also the end's wait for the hooks (a
threaded hook's ``drain_seconds``, MLflow's ``wait``; both ``--wait``, 10 s by default as in Sigma). And two
processor times from the run's start event to its stop event (:class:`Clock`): the training thread's, and the
other threads' (the hooks'), each holding the interpreter while it runs Python. Unlike the seconds, these do not
count the time other processes take the machine's cores: on a loaded machine, where a 0.15 s run's seconds
vary by half from one run to the next, they say what a hook costs the run itself. MLflow's
import (about 1-2 s, once per process, when the hook first attaches) is done before the rounds and printed apart.
Each round runs every configuration once, in a rotating order, so that drift in machine load hits all alike.
Reported: the best and the median training time with their ratios to ``none``'s, the median of each round's
ratio to that round's ``none`` (steadier under a drifting load), the median whole time; then the same as a
Markdown table with the command, the machine and the load, ready for BENCHMARKS.md.

``--per-event`` measures instead what the training thread pays per event in ``Dispatcher.emit`` (the digits run,
each event timed around the call) with no hook, a ``slow``, a ``blocked`` and a ``failing`` one: what every event
a threaded hook is sent costs the training thread directly, before any contention for the interpreter.

Usage: ``python benchmarks/monitor_stress.py [--runs digits mnist] [--mnist-data DIR] [--rounds N] [--wait S]
[--per-event]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from sigma_core import Hook, build_run
from sigma_core import config as run_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Each run: its run file and the settings that size it for a round.
RUNS = {"digits": (EXAMPLES / "digits.toml", ["training.epochs=20"]),
        "mnist": (EXAMPLES / "mnist.toml", ["training.epochs=2"])}


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


class Clock(Hook):
    """Inline, first: the training thread's processor time and the whole process's at the start and stop events."""

    name, order = "clock", -1e9

    def on_start(self):
        self.began = time.thread_time(), time.process_time()

    def on_stop(self):
        self.ended = time.thread_time(), time.process_time()

    def seconds(self) -> tuple[float, float]:
        """(the training thread's processor seconds, the other threads') between the two events."""
        thread, process = (end - start for start, end in zip(self.began, self.ended))
        return thread, process - thread


class Failing(Hook):
    """Raises in its first ``on_iteration``."""

    name, threaded = "failing", True

    def on_iteration(self):
        raise RuntimeError("failing on purpose")


def configurations(wait: float, silent: socket.socket | None) -> dict:
    """Name -> a function making that configuration's hooks, each waited for ``wait`` s at the end (``silent``: the
    socket that never answers, for ``mlflow silent``)."""
    from sigmann_mlflow.hook import MlflowHook

    def waiting(hook):
        hook.drain_seconds = wait
        return [hook]

    return {"none": list, "slow": lambda: waiting(Slow()), "blocked": lambda: waiting(Blocked()),
            "failing": lambda: waiting(Failing()),
            "mlflow down": lambda: [MlflowHook(tracking_uri="http://127.0.0.1:1", artifacts=False, wait=wait)],
            "mlflow silent": lambda: [MlflowHook(tracking_uri="http://%s:%d" % silent.getsockname(), artifacts=False,
                                                 wait=wait)]}


def times(run_file: Path, settings: list, hooks: list) -> tuple[float, float, float, float]:
    """(training seconds, seconds of the whole train call, the training thread's and the other threads' processor
    seconds) of the run with ``hooks``."""
    run, clock = build_run(run_config.load(run_file, settings)), Clock()
    started = time.perf_counter()
    run.train([clock, *hooks])
    return run.loop.seconds, time.perf_counter() - started, *clock.seconds()


def figures(measured: dict) -> list[dict]:
    """Per configuration: best and median training s, their ratios to none's, the median paired ratio, whole s; the
    median paired ratio of the training thread's processor time, and the other threads' median processor ms."""
    base = measured["none"]
    best, median = min(t[0] for t in base), statistics.median(t[0] for t in base)
    rows = []
    for name, runs in measured.items():
        training = [t[0] for t in runs]
        rows.append({"hooks": name, "best": min(training), "best_ratio": min(training) / best,
                     "median": statistics.median(training), "median_ratio": statistics.median(training) / median,
                     "paired": statistics.median(t[0] / b[0] for t, b in zip(runs, base)),
                     "whole": statistics.median(t[1] for t in runs),
                     "cpu": statistics.median(t[2] / b[2] for t, b in zip(runs, base)),
                     "others": statistics.median(t[3] for t in runs) * 1e3})
    return rows


def per_event(rounds: int) -> None:
    """Print the microseconds per ``Dispatcher.emit`` call (best and median of ``rounds`` digits runs)."""
    from sigma_core.hooks.dispatch import Dispatcher

    emit, spent = Dispatcher.emit, [0, 0.0]

    def timed(self, event, **arguments):
        started = time.perf_counter()
        try:
            return emit(self, event, **arguments)
        finally:
            spent[0], spent[1] = spent[0] + 1, spent[1] + time.perf_counter() - started

    Dispatcher.emit = timed
    run_file, settings = RUNS["digits"]
    for name in ("none", "slow", "blocked", "failing"):
        each = []
        for _ in range(rounds):
            spent[:] = [0, 0.0]
            times(run_file, settings, configurations(0.0, None)[name]())
            each.append(spent[1] / spent[0] * 1e6)
        print(f"{name:<8} {spent[0]} events a run; microseconds per emit: best {min(each):.1f}, median "
              f"{statistics.median(each):.1f} (load average {os.getloadavg()[0]:.1f})")
    Dispatcher.emit = emit


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return f"{model}, {len(os.sched_getaffinity(0))} usable cores, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=["digits", "mnist"])
    parser.add_argument("--mnist-data", type=Path, help="a folder of MNIST's IDX files (t10k-*), for --runs mnist")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wait", type=float, default=10.0, help="the hooks' drain_seconds and MLflow's wait")
    parser.add_argument("--per-event", action="store_true", help="the training thread's cost per event instead")
    args = parser.parse_args()
    if args.per_event:
        logging.getLogger("sigma").setLevel(logging.CRITICAL)
        with tempfile.TemporaryDirectory() as folder:
            os.chdir(folder)
            times(*RUNS["digits"], [])  # warm-up
            per_event(args.rounds)
        Blocked.released.set()
        return
    if "mnist" in args.runs and args.mnist_data is None:
        parser.error("--runs mnist needs --mnist-data DIR (a folder holding t10k-images-idx3-ubyte.gz, ...)")
    logging.getLogger("sigma").setLevel(logging.CRITICAL)  # the hooks' failure, drain and delivery lines
    started, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
    imported = time.perf_counter()
    import mlflow  # noqa: F401  once per process: not what a round measures
    imported = time.perf_counter() - imported
    results = {}
    with tempfile.TemporaryDirectory() as folder, socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4096)  # the kernel completes connections; nothing ever reads or answers them
        os.chdir(folder)  # the run directories, runs/<name>/version_N
        configs = configurations(args.wait, silent)
        names = list(configs)
        for run in args.runs:
            run_file, settings = RUNS[run]
            if run == "mnist":
                settings = [*settings, f"data.directory={args.mnist_data.resolve()}"]
            times(run_file, settings, [])  # warm-up: kernel compilation, the data set's first load
            measured = {name: [] for name in names}
            for round_ in range(args.rounds):  # each round in another order: no configuration always goes first
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    measured[name].append(times(run_file, settings, configs[name]()))
            results[run] = figures(measured)
    Blocked.released.set()
    load_after = os.getloadavg()
    for run, rows in results.items():
        print(f"{run}: {'hooks':<14}{'best s':>8}{'vs none':>9}{'median s':>10}{'vs none':>9}{'paired':>8}"
              f"{'whole s':>9}{'cpu paired':>12}{'others ms':>11}")
        for row in rows:
            print(f"{'':<{len(run) + 2}}{row['hooks']:<14}{row['best']:>8.3f}{row['best_ratio']:>9.3f}"
                  f"{row['median']:>10.3f}{row['median_ratio']:>9.3f}{row['paired']:>8.3f}{row['whole']:>9.2f}"
                  f"{row['cpu']:>12.3f}{row['others']:>11.1f}")
    print(f"\nCommand: `{' '.join(['python', *sys.argv])}`, {started}; machine: {machine()}; load average (1, 5, "
          f"15 min) {', '.join(f'{x:.1f}' for x in load_before)} before, {', '.join(f'{x:.1f}' for x in load_after)}"
          f" after; MLflow's import (once, before the rounds): {imported:.2f} s.\n")
    print("| run | hooks | training, best s | best vs none | training, median s | median vs none "
          "| per-round ratio, median | whole, median s | training thread's CPU, per-round ratio | hook threads' CPU, "
          "median ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run, rows in results.items():
        for row in rows:
            print(f"| {run} | {row['hooks']} | {row['best']:.3f} | {row['best_ratio']:.3f} | {row['median']:.3f} | "
                  f"{row['median_ratio']:.3f} | {row['paired']:.3f} | {row['whole']:.2f} | {row['cpu']:.3f} | "
                  f"{row['others']:.1f} |")


if __name__ == "__main__":
    main()

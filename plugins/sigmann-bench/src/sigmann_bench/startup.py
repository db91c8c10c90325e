"""The ``startup`` workload: a whole short ``sigma train`` process, ``cpu`` against ``numpy`` (issue 28).

Every other workload times steps inside long-lived processes; a new user's
first job is mostly everything before the first step (imports, the handler,
loading or compiling its kernels). So this one times whole processes:
``sigma train examples/digits.toml --set training.epochs=1`` (the README's main
job, one epoch) per handler, the handlers alternating in every round, each
process in a scratch directory (its ``runs/`` go there). The ``cpu`` handler is
timed twice per round: with a warm numba cache (a scratch cache directory the
first run of the workload fills) and with a cold one (a fresh directory each
time, so every kernel the run uses is compiled, by the run and by the helper
process ``sigma_cpu.precompile`` starts beside it). A process's time ends when
it exits; its helper, which compiles on detached, is waited for before the
next process starts. Records carry the ratio to the ``numpy`` run's median
and, for the cold cache, the seconds it adds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sigma_core import SigmaError

ARGS = ["--set", "training.epochs=1"]
#: ``sigma`` as its console script runs it, in this interpreter.
SIGMA = [sys.executable, "-c", "import sys; from sigma_core import cli_main; sys.exit(cli_main())"]


def run_file() -> Path:
    """examples/digits.toml of the source checkout Sigma runs from (the workload needs one, and sigmann-sklearn)."""
    import sigma_core

    path = Path(sigma_core.__file__).resolve().parents[1] / "examples" / "digits.toml"
    if not path.is_file():
        raise SigmaError(f"sigma bench: the startup workload runs {path}, which is not there "
                         "(it needs a source checkout of Sigma)")
    return path


def time_process(handler: str, workdir: str, cache: str) -> float:
    """Seconds from starting ``sigma train`` on ``handler`` to its exit."""
    env = dict(os.environ, SIGMA_NUMBA_CACHE_DIR=cache)
    start = time.perf_counter()
    done = subprocess.run([*SIGMA, "train", str(run_file()), *ARGS, "--handler", handler], cwd=workdir, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SigmaError(f"sigma bench: startup on {handler} exited with {done.returncode}: {last}")
    settle(handler, cache)
    return seconds


def settle(handler: str, cache: str) -> None:
    """Wait for the helper a ``cpu`` process may have left compiling into ``cache`` (see :mod:`sigma_cpu.precompile`):
    the next timed process must not share the CPUs with it, nor a deleted cache directory be written to."""
    if handler != "cpu":
        return
    from sigma_cpu import wait_for_precompile

    if not wait_for_precompile(cache):
        raise SigmaError(f"sigma bench: sigma_cpu's precompiling helper in {cache} did not finish within 120 s")


def systems(handlers) -> list[tuple[str, str, bool]]:
    """(system name, handler, cold cache) per timed process: numpy (the baseline) first, cpu warm and cold."""
    timed = [("sigma-numpy", "numpy", False)]
    timed += [(f"sigma-{h}", h, False) for h in handlers if h != "numpy"]
    if "cpu" in handlers:
        timed.append(("sigma-cpu-cold-cache", "cpu", True))
    return timed


def run(handlers, rounds: int, log) -> list[dict]:
    """``rounds`` alternating rounds of every system, progress to ``log``; one record per system (see the module
    docstring)."""
    timed = systems(handlers)
    samples = {name: [] for name, _, _ in timed}
    with tempfile.TemporaryDirectory(prefix="sigma-bench-startup-") as scratch:
        warm = os.path.join(scratch, "numba-cache")
        if "cpu" in handlers:
            time_process("cpu", scratch, warm)  # fills the warm cache; not timed
        for r in range(rounds):
            for name, handler, cold in timed:
                cache = tempfile.mkdtemp(prefix="cold-", dir=scratch) if cold else warm
                samples[name].append(time_process(handler, scratch, cache))
            print(f"sigma bench: startup round {r + 1}/{rounds}", file=log)
    baseline = statistics.median(samples["sigma-numpy"])
    warm_cpu = statistics.median(samples["sigma-cpu"]) if "cpu" in handlers else None
    records = []
    for name, handler, cold in timed:
        median = statistics.median(samples[name])
        record = {"workload": "startup", "system": name, "measure": "process",
                  "median_ms": round(median * 1e3, 1), "min_ms": round(min(samples[name]) * 1e3, 1),
                  "max_ms": round(max(samples[name]) * 1e3, 1), "ratio_to_numpy": round(median / baseline, 3),
                  "processes": len(samples[name]),
                  # whether the processes could write and reuse Python's bytecode cache, as an installed package does
                  "bytecode_cache": not os.environ.get("PYTHONDONTWRITEBYTECODE")}
        if cold:
            record["added_to_warm_ms"] = round((median - warm_cpu) * 1e3, 1)
        records.append(record)
    return records

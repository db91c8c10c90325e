"""How long a long run's ``metrics.jsonl`` takes to open: read (``read_history``), in ``sigma dashboard``, in
``sigma plot``, against a plain JSON pass over the same file measured in the same rounds.

    python plugins/sigmann-web/benchmarks/long_run.py [--size 125000000] [--rounds 5] [--sources DIR]

Writes the file the scale test uses (``tests/conftest.py``'s ``write_long_run``: 870,000 records for 125 MB) into
a temporary folder. Each round runs every system once, each in a process of its own, in an order rotated from
round to round; a machine shared with other work inflates wall times, so CPU times are given too, and each
system's CPU time as a ratio to the plain pass's in the same round (the median of the rounds'). The plain pass is
the standard library's ``json.loads`` over every line, the baseline the scale test's bound scales with.
``read_history`` and the plain pass are timed inside their process (after the imports); the dashboard from its
start to ``GET /`` and ``GET /api/history`` answered, the plot from start to exit (interpreter start included).

``--sources DIR``: also run ``read_history``, the dashboard and the plot on the sigmann-monitors, -web and -plots
sources of another checkout (e.g. ``git archive`` of an earlier commit, unpacked), put first on PYTHONPATH: a
before/after comparison in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import write_long_run  # noqa: E402  (the scale test's file, not a copy of it)

PLAIN_PASS = """
import json, sys, time
wall, cpu = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as stream:
    for line in stream:
        json.loads(line)
print(time.perf_counter() - wall, time.process_time() - cpu)
"""
READ_HISTORY = """
import sys, time
from sigmann_monitors import read_history
wall, cpu = time.perf_counter(), time.process_time()
read_history(sys.argv[1])
print(time.perf_counter() - wall, time.process_time() - cpu)
"""


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's children that have ended."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_inside(code: str, path: Path, env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds that ``code``, run in a process of its own, prints it took over ``path``."""
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, check=True, capture_output=True, text=True)
    wall, cpu = map(float, out.stdout.split())
    return wall, cpu


def dashboard(directory: Path, env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of ``sigma dashboard`` from its start to its page and ``/api/history`` answered."""
    began, spent = time.perf_counter(), children_cpu()
    server = subprocess.Popen([sys.executable, "-m", "sigma_core", "dashboard", str(directory)], env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        url = server.stderr.readline().split(" at ")[1].split()[0].rstrip("/")
        with httpx.Client(base_url=url, timeout=120) as client:
            client.get("/").raise_for_status()
            client.get("/api/history").raise_for_status()
        wall = time.perf_counter() - began
    finally:
        server.terminate()
        server.wait(30)
    return wall, children_cpu() - spent


def plot(directory: Path, env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of ``sigma plot`` of ``directory``, start to exit."""
    began, spent = time.perf_counter(), children_cpu()
    subprocess.run([sys.executable, "-m", "sigma_core", "plot", str(directory), "-o", str(directory / "p.png")],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - began, children_cpu() - spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=125_000_000, help="bytes of metrics.jsonl (default 125 MB)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sources", type=Path, help="another checkout's plugins, to compare (see the docstring)")
    args = parser.parse_args()
    environments = {"": dict(os.environ)}
    if args.sources:
        sources = [str(args.sources.resolve() / "plugins" / f"sigmann-{name}" / "src")
                   for name in ("monitors", "web", "plots")]
        kept = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
        environments[" (--sources)"] = {**os.environ, "PYTHONPATH": os.pathsep.join(sources + kept)}
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder) / "long"
        write_long_run(directory, args.size)
        path = directory / "metrics.jsonl"
        systems = {"plain JSON pass": lambda: timed_inside(PLAIN_PASS, path, environments[""])}
        for label, env in environments.items():
            systems[f"read_history{label}"] = lambda env=env: timed_inside(READ_HISTORY, path, env)
            systems[f"sigma dashboard{label}"] = lambda env=env: dashboard(directory, env)
            systems[f"sigma plot{label}"] = lambda env=env: plot(directory, env)
        names = list(systems)
        times = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                times[name].append(systems[name]())
        print(f"{path.stat().st_size:,} bytes, {args.rounds} rounds; load average now "
              f"{' '.join(f'{load:.1f}' for load in os.getloadavg())}")
        print(f"{'system':<32} {'wall best':>9} {'median':>7} {'CPU best':>9} {'median':>7} {'CPU / plain pass':>17}")
        plain = [cpu for _, cpu in times["plain JSON pass"]]
        for name in names:
            walls, cpus = zip(*times[name])
            ratio = statistics.median(cpu / base for cpu, base in zip(cpus, plain))
            print(f"{name:<32} {min(walls):9.2f} {statistics.median(walls):7.2f} {min(cpus):9.2f} "
                  f"{statistics.median(cpus):7.2f} {ratio:17.2f}")


if __name__ == "__main__":
    main()

"""How long ``import sigma_core`` plus plugin discovery takes in a fresh interpreter.

Every ``sigma`` command pays this before doing anything, so it has a budget:
at most 150 ms over a bare interpreter. Runs are interleaved so that drift in
machine load hits every command alike; the median resists outliers. Bare
``python`` and ``import numpy`` run alongside as yardsticks.

Usage: ``python benchmarks/import_time.py [--runs N]``; exits 1 over budget.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BUDGET_MS = 150.0

COMMANDS = {
    "python (baseline)": "pass",
    "import numpy": "import numpy",
    "sigma import + discovery": "import sigma_core, sigma_core.plugins as p; p.components()",
}


def time_once(code: str) -> float:
    """Wall time of one fresh interpreter running ``code``, in milliseconds."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs per command (at least 15; default 21)")
    runs = max(parser.parse_args().runs, 15)

    for code in COMMANDS.values():  # warm the file cache and write .pyc files
        time_once(code)
    samples = {label: [] for label in COMMANDS}
    for _ in range(runs):
        for label, code in COMMANDS.items():
            samples[label].append(time_once(code))

    medians = {label: statistics.median(times) for label, times in samples.items()}
    baseline = medians["python (baseline)"]
    print(f"median of {runs} runs, {sys.executable}")
    print(f"{'command':<26}{'ms':>8}{'over python':>14}")
    for label, median in medians.items():
        print(f"{label:<26}{median:>8.1f}{median - baseline:>+14.1f}")

    cost = medians["sigma import + discovery"] - baseline
    verdict = "within" if cost <= BUDGET_MS else "OVER"
    print(f"sigma import + discovery: {cost:.1f} ms over python, {verdict} the {BUDGET_MS:.0f} ms budget")
    return 0 if cost <= BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())

"""sigmann-bench: ``sigma bench`` arrives through register_commands and measures what it says."""

from __future__ import annotations

import json
import subprocess
import sys

from sigma_core import cli, plugins


def test_bench_is_a_command_of_this_distribution():
    plugins.reset()
    command = plugins.get("command", "bench")
    assert command.distribution == "sigmann-bench"
    assert "time training iterations" in command.description


def test_building_the_parser_imports_no_benchmark_code():
    code = ("import sys; from sigma_core.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('numpy', 'torch', 'jax', 'sigmann_bench.bench') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_quick_run_on_numpy_prints_a_record_per_system(capsys):
    assert cli.main(["bench", "--quick", "--json", "--handlers", "numpy", "--workloads", "small-mlp"]) == 0
    records = {r["system"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"sigma-numpy", "sigma-numpy-unrecorded", "numpy-loop", "gemms-only"} <= set(records)
    assert records["sigma-numpy"]["ratio_to_ours"] == 1.0
    assert all(r["workload"] == "small-mlp" and r["iterations"] == 20 and r["median_ms"] > 0 for r in records.values())


def test_unknown_workload_is_one_error_line(capsys):
    assert cli.main(["bench", "--quick", "--workloads", "huge-mlp"]) == 2
    from sigmann_bench.bench import extra_workloads

    extra = "".join(f", {name}" for name in extra_workloads())  # other distributions' (sigmann-vision: cnn)
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: sigma bench: unknown workload(s) huge-mlp (choose from sigma-mlp, small-mlp, probe{extra})")

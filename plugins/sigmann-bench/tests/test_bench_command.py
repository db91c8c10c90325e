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
        f"error: sigma bench: unknown workload(s) huge-mlp (choose from sigma-mlp, small-mlp, probe, startup{extra})")


def test_startup_times_whole_train_processes_against_numpy(capsys, tmp_path, monkeypatch):
    """One round on numpy alone: a record of a real ``sigma train`` process, leaving no run directory behind."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--quick", "--json", "--handlers", "numpy", "--workloads", "startup"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert record["workload"] == "startup" and record["system"] == "sigma-numpy" and record["measure"] == "process"
    assert record["ratio_to_numpy"] == 1.0 and record["processes"] == 2 and record["min_ms"] > 0
    assert list(tmp_path.iterdir()) == []


def test_startup_times_cpu_with_a_warm_and_a_cold_cache():
    from sigmann_bench import startup

    assert startup.systems(["cpu", "numpy"]) == [
        ("sigma-numpy", "numpy", False), ("sigma-cpu", "cpu", False), ("sigma-cpu-cold-cache", "cpu", True)]


def test_a_failing_startup_process_is_one_error_line(capsys, monkeypatch):
    from sigmann_bench import startup

    monkeypatch.setattr(startup, "ARGS", ["--set", "training.epochs=0"])
    assert cli.main(["bench", "--quick", "--handlers", "numpy", "--workloads", "startup"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: sigma bench: startup on numpy exited with 2: ")

"""sigmann_bench.gpu without a GPU: its rounds and records, with stand-in systems in forked workers.

The real systems (sigma-cuda, cuBLAS, PyTorch, JAX on the device) run only where
a GPU is lent: ``sigma_cuda/gpu_check.sh`` runs them there.
"""

from __future__ import annotations

import io
import multiprocessing
import time

import pytest

from sigma_core import cli
from sigmann_bench import gpu


def _sleeper(seconds):
    def make(spec, params, batch):
        return (lambda host: time.sleep(seconds)), (lambda: None)

    return make


def test_a_gpu_workload_gives_one_record_per_system_with_ratios(monkeypatch):
    fork = multiprocessing.get_context("fork")  # forked workers see the stand-ins patched in below
    monkeypatch.setattr(multiprocessing, "get_context", lambda method=None: fork)
    monkeypatch.setattr(gpu, "SYSTEMS", {"sigma-cuda": (None, _sleeper(0.004)), "gemms-only": (None, _sleeper(0.001))})
    monkeypatch.setattr(gpu, "SETTLE_S", 0)
    log = io.StringIO()
    records = {r["system"]: r for r in gpu.bench_workload("small-mlp", 3, 5, 1, log)}
    assert set(records) == {"sigma-cuda", "gemms-only"} and "small-mlp done" in log.getvalue()
    ours, gemms = records["sigma-cuda"], records["gemms-only"]
    assert ours["ratio_to_ours"] == 1.0 and gemms["ratio_to_gemms"] == 1.0
    assert 4.0 <= ours["median_ms"] < 40 and 1.0 <= gemms["median_ms"] < ours["median_ms"]
    assert ours["min_ms"] <= ours["median_ms"] <= ours["max_ms"] and ours["iterations"] == 15 and ours["batch"] == 100
    assert ours["samples_per_s"] == pytest.approx(100 / (ours["median_ms"] / 1e3), rel=1e-3)
    assert ours["ratio_to_gemms"] == pytest.approx(ours["median_ms"] / gemms["median_ms"], rel=1e-2)


def test_third_party_systems_are_listed_only_when_importable(monkeypatch):
    monkeypatch.setattr(gpu.importlib.util, "find_spec", lambda name: None)
    assert gpu.system_names() == ["sigma-cuda"]


def test_bench_on_cuda_without_a_device_is_one_error_line(capsys):
    from sigma_core import handler_availability

    if handler_availability("cuda")[0]:
        pytest.skip("a CUDA device is available here")
    assert cli.main(["bench", "--quick", "--handlers", "cuda"]) == 2
    assert capsys.readouterr().err == "error: sigma bench: none of the requested handlers can run here\n"

"""gpu_check.sh and gpu_check.py without a GPU: that the check cannot pass where nothing ran.

Each test reads the script or runs a step of it here: what it installs (derived from the GPU tests'
imports), how it stops, how it counts, what its figures say about replay.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "sigma_cuda" / "gpu_check.sh"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "sigma_cuda" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_parses_and_asks_for_a_part():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 2 and "--part 1|2" in result.stderr


def test_the_script_runs_the_gpu_tests_serially_with_cublas_determinism_within_its_budget():
    text = SCRIPT.read_text()
    assert "export CUBLAS_WORKSPACE_CONFIG=:4096:8" in text
    pytest_lines = [line for line in text.splitlines() if "-m pytest" in line]
    assert pytest_lines and not any(re.search(r"\s-n\s", line) for line in pytest_lines)  # no xdist: serial
    runs = [line for line in text.splitlines() if re.search(r"-m pytest|-m sigma_core bench|gpu_profile.py >|replay-status", line)]
    assert len(runs) == 4 and all(line.strip().startswith('timeout "$(limit ') for line in runs), runs
    budget = int(re.search(r"^BUDGET=(\d+)", text, re.M).group(1))
    parts = text.split('if [ "$part" = 1 ]; then')[1].split("else")
    for part in parts[:2]:  # each part's stages, run one after another, fit the budget
        assert sum(int(n) for n in re.findall(r"limit (\d+)", part)) <= budget - 60 <= 600 - 60


def test_what_the_script_installs_covers_every_sigma_import_of_the_gpu_tests(gpu_check):
    """Each module the device run imports must come from an installed folder: read here independently of
    gpu_check.py, from where each module is installed in this checkout."""
    installed = set(gpu_check.distributions())
    for importer in gpu_check.IMPORTERS:
        for node in ast.walk(ast.parse((ROOT / importer).read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                spec = importlib.util.find_spec(name.split(".")[0])
                origin = Path(spec.origin).resolve() if spec and spec.origin and Path(spec.origin).is_absolute() else None
                if origin is None or ROOT not in origin.parents or "site-packages" in origin.parts:
                    continue  # not this repository's
                parts = origin.relative_to(ROOT).parts
                home = "." if parts[0] == "sigma_core" else "/".join(parts[:2]) if parts[0] == "plugins" else parts[0]
                assert home in installed, (importer, name, home)
    named = {"plugins/sigmann-testing", "plugins/sigmann-replay", "plugins/sigmann-recurrent", "plugins/sigmann-sklearn",
             "plugins/sigmann-bench", "plugins/sigmann-vision", ".", "sigma_cuda"}
    assert named <= installed
    for directory in installed:  # what those depend on is installed too (pip runs with --no-deps)
        assert (ROOT / directory / "pyproject.toml").exists(), directory
        assert set(gpu_check.dependencies(directory)) <= installed, directory
    assert "plugins/sigmann-data" in installed  # sigmann-mnist's dependency


def test_preflight_stops_in_one_line_without_cupy():
    result = subprocess.run([sys.executable, str(ROOT / "sigma_cuda" / "gpu_check.py"), "preflight", "/nonexistent"],
                            capture_output=True, text=True)
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["GPU CHECK STOPPED: import cupy failed: ModuleNotFoundError: "
                                                  "No module named 'cupy'"]


def test_preflight_stops_in_one_line_when_the_handler_is_unavailable(tmp_path, monkeypatch):
    """A CuPy that imports, on a machine without a driver: the handler's own reason, in the one line."""
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("this machine has a CUDA driver")
    except OSError:
        pass
    for name, text in (("cupy", "from types import SimpleNamespace\n__version__ = 'stand-in'\n"
                                "cuda = SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: 1, "
                                "runtimeGetVersion=lambda: 13000))\n"), ("cupyx", "")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = subprocess.run([sys.executable, str(ROOT / "sigma_cuda" / "gpu_check.py"), "preflight", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["GPU CHECK STOPPED: the cuda handler is unavailable: no CUDA device "
                                                  "(no NVIDIA driver: libcuda.so.1 not found)"]


def _junit(path, outcomes):
    cases = "".join(f'<testcase classname="t" name="test_{i}">{"" if o == "passed" else f"<{o}/>"}</testcase>'
                    for i, o in enumerate(outcomes))
    path.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')


@pytest.mark.parametrize("outcomes, expected, status", [
    (["passed"] * 3, 3, 0),
    (["passed", "passed", "skipped"], 3, 1),  # a skip is a test that did not run
    (["passed"] * 2, 3, 1),  # the run stopped early
    (["passed", "failure", "passed"], 3, 1),
])
def test_the_count_fails_unless_every_collected_test_ran_and_passed(gpu_check, tmp_path, monkeypatch, capsys,
                                                                    outcomes, expected, status):
    monkeypatch.setattr(gpu_check, "collect", lambda tests, out, extra: [f"t::test_{i}" for i in range(expected)])
    _junit(tmp_path / "junit.xml", outcomes)
    assert gpu_check.count(tmp_path, "tests") == status
    assert f"of {expected} expected ran" in capsys.readouterr().out


def test_no_report_is_a_failure(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "collect", lambda tests, out, extra: ["t::test_0"])
    assert gpu_check.count(tmp_path, "tests") == 1


def test_the_collection_leaves_out_only_the_named_tests(gpu_check, tmp_path):
    (tmp_path / "deselect.txt").write_text("test_mnist_example_reaches_95_percent_on_cuda\tno MNIST files\n")
    collected = gpu_check.collect("sigma_cuda/tests/test_cuda_gpu.py", tmp_path)
    assert len(collected) > 100 and not any("mnist" in test for test in collected)
    assert any("TestCudaConformance" in test and "float64" in test for test in collected)
    conformance = gpu_check.collect("sigma_cuda/tests/test_cuda_gpu.py", tmp_path, ["-k", "Conformance"])
    rest = gpu_check.collect("sigma_cuda/tests/test_cuda_gpu.py", tmp_path, ["-k", "not Conformance"])
    assert sorted(conformance + rest) == sorted(collected) and conformance and rest  # two calls cover one


def test_the_figures_say_whether_each_bench_row_timed_replayed_steps(gpu_check, tmp_path):
    rows = [{"workload": w, "system": s, "measure": "iteration", "batch": 100, "median_ms": 1.0, "samples_per_s": 1e5,
             "ratio_to_ours": 1.0} for w in ("sigma-mlp", "small-mlp") for s in ("sigma-cuda", "sigma-cuda-unrecorded", "pytorch-eager")]
    (tmp_path / "bench.json").write_text(json.dumps(rows))
    (tmp_path / "replay.json").write_text(json.dumps({
        "sigma-mlp": {"replayed": 3, "steps": 5, "reason": ""},
        "small-mlp": {"replayed": 0, "steps": 5, "reason": "not captured: dense allocates device memory"}}))
    _junit(tmp_path / "junit.xml", ["passed"])
    lines = gpu_check.figures(tmp_path).splitlines()
    cells = {tuple(line.split()[:2]): line.split("  ")[-1].strip() for line in lines if line.startswith(("sigma-mlp ", "small-mlp "))}
    assert cells[("sigma-mlp", "sigma-cuda")] == "yes"
    assert cells[("small-mlp", "sigma-cuda")] == "NO: not captured: dense allocates device memory"
    assert cells[("sigma-mlp", "sigma-cuda-unrecorded")] == "off" and cells[("sigma-mlp", "pytorch-eager")] == "-"


def test_where_the_handler_is_unavailable_the_count_fails(gpu_check, tmp_path, capsys):
    """The old check's lie: every GPU test skips here, pytest exits 0, and the count says no."""
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", gpu_check.GPU_TESTS,
                          f"--junitxml={tmp_path / 'junit.xml'}"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0  # all skipped: green to pytest
    assert gpu_check.count(tmp_path, gpu_check.GPU_TESTS) == 1
    assert "GPU CHECK FAILED: only 0 of the" in capsys.readouterr().out

"""What needs no GPU: the availability check and its reasons, lazy imports, device names, CLI errors.

The driver is simulated where a test needs one (a fake ``libcuda`` behind
``ctypes.CDLL``), so these run, and must pass, on every machine.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sigma_core import cli, plugins

from sigma_core.compute import backend
from sigma_core.errors import SigmaError
from sigma_cuda import devices

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_plugin_state(monkeypatch):
    """A fresh registry (no conftest.py here: it would clash with tests/conftest.py)."""
    for var in ("SIGMA_PLUGINS", "SIGMA_STRICT_PLUGINS", "SIGMA_HANDLER"):
        monkeypatch.delenv(var, raising=False)
    plugins.reset()
    yield
    plugins.reset()
REASONS = ("CuPy is not installed", "no CUDA device", "driver/runtime mismatch", "CuPy cannot use the CUDA driver",
           "the CUDA driver failed")


class FakeDriver:
    """``libcuda`` as ctypes sees it: each cu* function writes through its byref arguments and returns a code."""

    def __init__(self, devices=(("NVIDIA H100 80GB HBM3", 85_520_809_984),), version=13000, init=0):
        self.devices, self.version, self.init = devices, version, init

    def cuInit(self, flags):
        return self.init

    def cuDriverGetVersion(self, out):
        out._obj.value = self.version
        return 0

    def cuDeviceGetCount(self, out):
        out._obj.value = len(self.devices)
        return 0

    def cuDeviceGet(self, out, index):
        out._obj.value = index
        return 0

    def cuDeviceGetName(self, buffer, length, handle):
        buffer.value = self.devices[handle.value][0].encode()
        return 0

    def cuDeviceTotalMem_v2(self, out, handle):
        out._obj.value = self.devices[handle.value][1]
        return 0

    def cuGetErrorName(self, code, out):
        out._obj.value = b"CUDA_ERROR_OPERATING_SYSTEM"
        return 0


@pytest.fixture
def driver(monkeypatch):
    """Install a fake driver (and pretend CuPy is installed); returns a function taking FakeDriver's arguments."""
    devices.probe_driver.cache_clear()
    monkeypatch.setattr(devices.importlib.util, "find_spec", lambda name: object() if name == "cupy" else None)

    def install(**kwargs):
        fake = FakeDriver(**kwargs)
        monkeypatch.setattr(devices.ctypes, "CDLL", lambda name: fake)
        return fake

    yield install
    devices.probe_driver.cache_clear()


def test_without_cupy_the_check_says_so_and_how_to_install_it(monkeypatch):
    monkeypatch.setattr(devices.importlib.util, "find_spec", lambda name: None)
    available, reason = devices.check()
    assert not available
    assert reason.startswith("CuPy is not installed") and "sigmann-cuda[cuda12]" in reason


def test_without_a_driver_library_the_reason_is_no_cuda_device(driver, monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(devices.ctypes, "CDLL", missing)
    assert devices.check() == (False, "no CUDA device (no NVIDIA driver: libcuda.so.1 not found)")


def test_a_driver_that_sees_no_device(driver):
    driver(init=100)  # CUDA_ERROR_NO_DEVICE
    assert devices.check() == (False, "no CUDA device (the NVIDIA driver sees none)")
    devices.probe_driver.cache_clear()
    driver(devices=())
    assert devices.check() == (False, "no CUDA device (the NVIDIA driver sees none)")


def test_another_driver_error_is_named(driver):
    driver(init=304)
    assert devices.check() == (False, "the CUDA driver failed in cuInit: CUDA_ERROR_OPERATING_SYSTEM")


def test_a_driver_older_than_the_cupy_wheel_is_a_mismatch(driver, monkeypatch):
    driver(version=12040)
    monkeypatch.setattr(devices, "cupy_cuda_major", lambda: 13)
    available, reason = devices.check()
    assert not available
    assert reason.startswith("driver/runtime mismatch: the NVIDIA driver supports CUDA 12.4, the installed CuPy "
                             "wheel needs CUDA 13")


def test_available_devices_are_listed_with_name_and_memory(driver, monkeypatch):
    driver(devices=(("NVIDIA H100 80GB HBM3", 80 * 2**30), ("NVIDIA H200", 141 * 2**30)), version=13000)
    monkeypatch.setattr(devices, "cupy_cuda_major", lambda: 13)
    assert devices.check() == (True, "2 devices: 0: NVIDIA H100 80GB HBM3 (80.0 GiB); 1: NVIDIA H200 (141.0 GiB)")


def test_sigma_plugins_shows_the_devices_of_an_available_cuda_handler(driver, monkeypatch, capsys):
    driver(devices=(("NVIDIA H100 80GB HBM3", 80 * 2**30),))
    monkeypatch.setattr(devices, "cupy_cuda_major", lambda: 12)
    assert cli.main(["plugins"]) == 0
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.split()[:2] == ["handler", "cuda"]]
    assert line.endswith("available — 1 device: 0: NVIDIA H100 80GB HBM3 (80.0 GiB)")


def test_cuda_ranks_above_cpu_and_numpy_for_auto():
    ranks = {c.name: c.rank for c in plugins.components("handler")}
    assert ranks["cuda"] > ranks["cpu"] > ranks["numpy"]


def test_discovery_and_the_check_import_no_cupy():
    code = ("import sys; from sigma_core import plugins; "
            "[c.availability() for c in plugins.components()]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'cupyx') or m in "
            "('sigma_cuda.handler', 'sigma_cuda.kernels', 'sigma_cuda.upload')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# -- the command line on a machine where cuda cannot run ---------------------------------------------
def _sigma(*argv):
    return subprocess.run([sys.executable, "-m", "sigma_core", *argv], capture_output=True, text=True, cwd=ROOT)


def _unavailable_reason() -> str:
    available, reason = backend.handler_availability("cuda")
    if available:
        pytest.skip("a CUDA device is available here: these tests check the machine without one")
    return reason


def test_sigma_plugins_json_lists_cuda_as_unavailable_with_the_reason():
    reason = _unavailable_reason()
    result = _sigma("plugins", "--json")
    assert result.returncode == 0, result.stderr
    [row] = [r for r in json.loads(result.stdout) if (r["kind"], r["name"]) == ("handler", "cuda")]
    assert row["available"] is False and row["distribution"] == "sigmann-cuda"
    assert row["reason"] == reason and reason.startswith(REASONS)


def test_training_on_cuda_without_a_device_is_one_line_with_the_reason_and_the_alternatives():
    reason = _unavailable_reason()
    result = _sigma("train", "examples/digits.toml", "--handler", "cuda")
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: handler 'cuda' cannot run here: ")
    assert reason in line and line.endswith(")") and "(available: " in line and "numpy" in line.split("(available: ")[1]


# -- device names --------------------------------------------------------------------------------------
def test_device_numbers_parse():
    assert devices.parse_device("1") == 1
    assert devices.parse_device(0) == 0
    for bad in ("x", "-1", "", -1, True, 1.5):
        with pytest.raises(SigmaError, match=r"the device must be a number ≥ 0, as in 'cuda:1'"):
            devices.parse_device(bad)


def test_a_bad_device_suffix_is_a_clear_error_before_anything_is_loaded():
    with pytest.raises(SigmaError, match=r"^handler 'cuda:x': the part after ':' must be a device number, as in 'cuda:1'$"):
        backend.create_handler("cuda:x")
    with pytest.raises(SigmaError, match=r"^handler 'numpy' has no devices to choose from \(drop ':1'\)$"):
        backend.create_handler("numpy:1")
    assert backend.create_handler("numpy").name == "numpy"


def test_a_bad_device_on_the_command_line_is_one_error_line():
    result = _sigma("train", "examples/digits.toml", "--handler", "cuda:x")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: handler 'cuda:x': the part after ':' must be a device number, as in 'cuda:1'"]


def test_out_of_memory_message_names_the_op_and_the_bytes():
    message = devices.out_of_memory_message("dense", (4096, 1000), "float32", 0, 1_000, 80 * 2**30, 5 * 2**30)
    assert message == ("CUDA device 0 is out of memory in dense: 16,384,000 bytes asked for a (4096, 1000) float32 "
                       "array; 1,000 of 85,899,345,920 bytes free, 5,368,709,120 held by CuPy's pool (lower the batch size)")


def test_ctypes_fake_matches_the_real_calling_convention():
    """The fake driver is written against ctypes' byref objects: make sure they behave as it assumes."""
    value = ctypes.c_int()
    ref = ctypes.byref(value)
    ref._obj.value = 7
    assert value.value == 7

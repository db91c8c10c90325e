"""Whether the ``cuda`` handler can run here, answered without importing CuPy.

Every ``sigma`` command discovers plugins, and importing CuPy costs a few
hundred milliseconds, so the ``check`` it is registered with only looks for the package
(:func:`importlib.util.find_spec`) and asks the NVIDIA driver itself, through
``ctypes``, how many devices there are, their names and memory, and which CUDA
version it supports. That also tells the three reasons apart: no CuPy, no
device, and a driver older than the CUDA runtime the installed CuPy wheel was
built for.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import sys
from dataclasses import dataclass
from importlib import metadata

from sigma_core import SigmaError

INSTALL_HINT = "pip install 'sigmann-cuda[cuda12]', or [cuda13] for a CUDA 13 driver"

#: CuPy's wheels, by the CUDA major version they are built for.
CUPY_WHEELS = {"cupy-cuda13x": 13, "cupy-cuda12x": 12, "cupy-cuda11x": 11}

_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    memory: int  # bytes

    def __str__(self):
        return f"{self.index}: {self.name} ({self.memory / 2**30:.1f} GiB)"


@dataclass(frozen=True)
class Probe:
    """What the driver said: the devices, its CUDA version (e.g. 12040), or why it could not say."""

    devices: tuple = ()
    driver_version: int = 0
    error: str = ""


def check() -> tuple[bool, str]:
    """The registered ``check``: ``(True, "<devices>")`` or ``(False, why)``; never imports CuPy."""
    if importlib.util.find_spec("cupy") is None:
        return False, f"CuPy is not installed ({INSTALL_HINT})"
    probe = probe_driver()
    if probe.error:
        return False, probe.error
    needed = cupy_cuda_major()
    if needed and probe.driver_version // 1000 < needed:
        return False, (f"driver/runtime mismatch: the NVIDIA driver supports CUDA {version_text(probe.driver_version)}, "
                       f"the installed CuPy wheel needs CUDA {needed} (update the driver, or install the CuPy wheel "
                       f"for CUDA {probe.driver_version // 1000})")
    return True, describe(probe.devices)


def describe(devices) -> str:
    """One line for ``sigma plugins``: every visible device with its name and memory."""
    return f"{len(devices)} device{'s' if len(devices) != 1 else ''}: " + "; ".join(map(str, devices))


def version_text(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


def cupy_cuda_major() -> int:
    """The CUDA major version the installed CuPy wheel targets (0: a source build, unknown)."""
    for wheel, major in CUPY_WHEELS.items():
        try:
            metadata.version(wheel)
        except metadata.PackageNotFoundError:
            continue
        return major
    return 0


@functools.cache
def probe_driver() -> Probe:
    """Ask the driver library (``libcuda``) directly; cached: the answer does not change within a process."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
    except OSError:
        return Probe(error=f"no CUDA device (no NVIDIA driver: {name} not found)")

    def call(function, *args) -> int:
        return getattr(cuda, function)(*args)

    def failure(function, code) -> Probe:
        if code == _NO_DEVICE:
            return Probe(error="no CUDA device (the NVIDIA driver sees none)")
        text = ctypes.c_char_p()
        call("cuGetErrorName", code, ctypes.byref(text))
        return Probe(error=f"the CUDA driver failed in {function}: {(text.value or b'error %d' % code).decode()}")

    code = call("cuInit", 0)
    if code:
        return failure("cuInit", code)
    version, count = ctypes.c_int(), ctypes.c_int()
    for function, out in (("cuDriverGetVersion", version), ("cuDeviceGetCount", count)):
        code = call(function, ctypes.byref(out))
        if code:
            return failure(function, code)
    if count.value == 0:
        return Probe(driver_version=version.value, error="no CUDA device (the NVIDIA driver sees none)")
    devices = []
    for index in range(count.value):
        handle, memory, text = ctypes.c_int(), ctypes.c_size_t(), ctypes.create_string_buffer(256)
        for function, args in (("cuDeviceGet", (ctypes.byref(handle), index)),
                               ("cuDeviceGetName", (text, 256, handle)),
                               ("cuDeviceTotalMem_v2", (ctypes.byref(memory), handle))):
            code = call(function, *args)
            if code:
                return failure(function, code)
        devices.append(Device(index, text.value.decode(errors="replace"), memory.value))
    return Probe(tuple(devices), version.value)


def out_of_memory_message(op, shape, dtype, device, free, total, pool_bytes) -> str:
    """What an out-of-memory error says: the op, the bytes asked for, what the device and CuPy's pool hold."""
    import numpy  # here: discovery imports this module, and needs no NumPy

    nbytes = math.prod(shape) * numpy.dtype(dtype).itemsize
    return (f"CUDA device {device} is out of memory in {op}: {nbytes:,} bytes asked for a {tuple(shape)} "
            f"{numpy.dtype(dtype)} array; {free:,} of {total:,} bytes free, {pool_bytes:,} held by CuPy's pool "
            "(lower the batch size)")


def parse_device(device) -> int:
    """A device number from ``cuda:<n>``'s ``<n>`` (or an int); anything else is a one-line error."""
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device
    if isinstance(device, str) and device.strip().isdigit():
        return int(device)
    raise SigmaError(f"handler 'cuda:{device}': the device must be a number ≥ 0, as in 'cuda:1'")

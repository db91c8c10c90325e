"""Which library the ``cpu`` handler's matrix products come from: oneMKL when the ``mkl`` wheel is installed,
otherwise the OpenBLAS inside NumPy.

Why two: at the shapes of a small recurrent or dense step (32x256x1024 in
float32), oneMKL on *one* core did what NumPy's OpenBLAS needed two cores for
(issue 38, on a 2-core Xeon), which leaves the other core for the passes
around the products. The wheel is
an optional extra (``pip install sigmann-cpu[mkl]``) because it weighs
hundreds of megabytes; without it nothing changes.

The choice (:func:`choose`, made as each ``cpu`` handler is created):
``SIGMA_CPU_BLAS=mkl`` or ``openblas`` forces one; unset or ``auto`` takes
oneMKL when its library is installed *and the CPU is Intel's*. On other
CPUs oneMKL runs a generic path (no AVX-512 on a Zen 4, where NumPy's
OpenBLAS uses its AVX-512 kernels): measured on a 2-core AMD EPYC it was no
faster at the MLPs' and the LSTM's products and about 3x slower at the narrow
ones (N = 10), so there ``auto`` keeps OpenBLAS (BENCHMARKS.md, issue 38;
sigma_cpu/README.md, "AMD processors"). Asking for
``mkl`` without the wheel is a :class:`~sigma_core.SigmaError` (one line, exit
status 2), never a quiet fallback to OpenBLAS: a user who asked for it is
timing or checking something.

Threads (:func:`load`): oneMKL is switched to its *sequential* layer before
its first call. Its parallel layers bring a second OpenMP runtime (Intel's
``libiomp5``, or GNU's with a pool of its own) next to numba's pool, and two
pools on two cores spin against each other. Instead the handler splits a
large product into column blocks and runs them on numba's pool, one
sequential oneMKL call per thread, with each block's bias and activation done
by the same thread while the block is in its cache (``_gemm_blocks`` in
:mod:`sigma_cpu.kernels`). So there is one pool: numba's, which OpenBLAS
already runs its jobs on (:mod:`sigma_cpu.blas_pool`). The call overrides
``MKL_THREADING_LAYER``: a ``GNU`` or ``INTEL`` layer inside numba's threads
would start pools of its own.

oneMKL is called through its 64-bit-integer CBLAS entry points
(``cblas_sgemm_64``, ``cblas_dgemm_64``) under the names :data:`SYMBOLS`;
compiled code refers to those names only, so numba's disk cache keeps it and
the address is linked in when it loads.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
from pathlib import Path

from sigma_core import SigmaError

#: The setting that forces a provider, and the values it takes.
VARIABLE = "SIGMA_CPU_BLAS"
CHOICES = ("auto", "mkl", "openblas")
#: The vendor string of the CPUs oneMKL has its fast paths for: ``auto`` takes oneMKL on these only.
INTEL = "GenuineIntel"
#: What compiled code calls, by dtype character: LLVM symbols bound to the chosen library's 64-bit-integer GEMMs.
SYMBOLS = {"f": "sigma_cpu_sgemm", "d": "sigma_cpu_dgemm"}
#: oneMKL's entry points behind them.
_ENTRY_POINTS = ("cblas_sgemm_64", "cblas_dgemm_64")
_MKL_THREADING_SEQUENTIAL = 1  # mkl_set_threading_layer's argument (mkl_service.h: MKL_THREADING_SEQUENTIAL)

_libraries = {}  # provider -> its ctypes library, loaded once per process and kept while compiled code may call it


def mkl_library() -> Path | None:
    """``libmkl_rt.so.*`` of the installed ``mkl`` wheel, found from the wheel's file list (nothing is loaded)."""
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.startswith("libmkl_rt.so"):
            path = Path(file.locate())
            if path.exists():
                return path.resolve()
    return None


def cpu_vendor() -> str:
    """The CPU's vendor as the kernel reports it (``GenuineIntel``, ``AuthenticAMD``), or "" where unknown."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def choose(environ=os.environ) -> str:
    """``"mkl"`` or ``"openblas"``: what ``SIGMA_CPU_BLAS`` forces, else oneMKL where installed on an Intel CPU."""
    asked = environ.get(VARIABLE, "auto").strip().lower() or "auto"
    if asked not in CHOICES:
        raise SigmaError(f"{VARIABLE}={asked!r}: expected one of {', '.join(CHOICES)}")
    if asked == "mkl" and mkl_library() is None:
        raise SigmaError(f"{VARIABLE}=mkl but oneMKL is not installed (pip install 'sigmann-cpu[mkl]', or unset "
                         f"{VARIABLE} to use NumPy's OpenBLAS)")
    if asked == "auto":
        return "mkl" if mkl_library() is not None and cpu_vendor() == INTEL else "openblas"
    return asked


def summary(environ=os.environ) -> str:
    """One line for ``sigma plugins``: the provider a handler created now would use, without loading it."""
    try:
        provider = choose(environ)
    except SigmaError as error:
        return f"BLAS: {error}"
    if environ.get(VARIABLE, "auto").strip().lower() not in ("", "auto"):
        return f"BLAS: {provider}, forced by {VARIABLE}"
    if provider == "openblas" and mkl_library() is not None:
        return f"BLAS: openblas (oneMKL installed, not chosen on this {cpu_vendor() or 'non-Intel'} CPU; {VARIABLE}=mkl " \
               f"forces it)"
    return f"BLAS: {provider}"


def _mkl():
    """oneMKL's runtime library, switched to its sequential layer before anything calls it."""
    path = mkl_library()
    library = ctypes.CDLL(str(path))
    if not all(hasattr(library, name) for name in _ENTRY_POINTS):
        raise SigmaError(f"{VARIABLE}: {path} has no {' or '.join(_ENTRY_POINTS)} (oneMKL 2025 or later has both)")
    library.MKL_Set_Threading_Layer.argtypes, library.MKL_Set_Threading_Layer.restype = [ctypes.c_int], ctypes.c_int
    library.MKL_Set_Threading_Layer(_MKL_THREADING_SEQUENTIAL)
    return library


def load() -> str:
    """The provider :func:`choose` picks now (each handler asks as it is created); oneMKL is loaded, and
    :data:`SYMBOLS` bound to it, the first time, before :mod:`sigma_cpu.gemm`'s callers compile or load machine
    code that calls them.

    NumPy's OpenBLAS needs nothing: with it the handler multiplies with ``numpy.matmul`` as it always has, its
    jobs on numba's pool (:mod:`sigma_cpu.blas_pool`); a compiled call into OpenBLAS from a pool thread would
    have OpenBLAS hand its jobs back to the same pool from inside it.
    """
    provider = choose()
    if provider == "mkl" and provider not in _libraries:
        from llvmlite import binding as llvm

        library = _mkl()
        for symbol, entry_point in zip(SYMBOLS.values(), _ENTRY_POINTS):
            llvm.add_symbol(symbol, ctypes.cast(getattr(library, entry_point), ctypes.c_void_p).value)
        _libraries[provider] = library
    return provider

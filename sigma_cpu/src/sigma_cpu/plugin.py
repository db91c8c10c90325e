"""Registers the ``cpu`` handler; imports nothing heavy (every ``sigma`` command runs this)."""

from __future__ import annotations

import importlib.util

from sigma_core import hookimpl


def numba_installed() -> tuple[bool, str]:
    """Looks for numba without importing it (importing numba costs ~0.3 s); when it is there, the reason names
    the BLAS the handler's products would come from (``sigma plugins`` shows it)."""
    if importlib.util.find_spec("numba") is None:
        return False, "numba is not installed"
    from .blas import summary  # no numba, no library loaded: reads the installed files

    return True, summary()


@hookimpl
def register_handlers(register):
    register(
        "cpu",
        "sigma_cpu.handler:NumbaHandler",
        rank=10,  # above the numpy handler (0): auto picks this one when numba is there
        check=numba_installed,
        description="numba-compiled fused kernels on the CPU, BLAS matrix products",
    )

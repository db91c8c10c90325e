"""Registers the ``cuda`` handler; imports nothing heavy (every ``sigma`` command runs this)."""

from __future__ import annotations

from sigma_core import hookimpl

from . import devices


@hookimpl
def register_handlers(register):
    register(
        "cuda",
        "sigma_cuda.handler:CudaHandler",
        rank=20,  # above cpu (10) and numpy (0): auto picks a GPU when one can run
        check=devices.check,
        description="CuPy on an NVIDIA GPU: cuBLAS matrix products, fused CUDA kernels ('cuda:1' for device 1)",
    )

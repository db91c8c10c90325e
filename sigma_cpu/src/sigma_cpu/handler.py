"""The ``cpu`` handler: the numpy reference handler with numba kernels on the hot paths."""

from sigma_core import Handler

from .kernels import NumbaKernels


class NumbaHandler(Handler):
    """Host memory, BLAS matrix products, numba-compiled fused kernels (float32 or float64).

    Everything but the kernels is inherited: autodiff, sessions and buffer
    reuse behave exactly as on the numpy handler, which the conformance kit
    (``sigmann_testing.HandlerConformance``, in tests/test_cpu_handler.py)
    checks op by op, plugin ops included.
    """

    name = "cpu"
    kernels_class = NumbaKernels
    compiles_kernels = True  # numba compiles on first use (once per machine: cached); the progress bar says so

    def __repr__(self):
        """Names the BLAS too: the run's header line ("... parameters on <...>") shows which one a figure had."""
        return f"<{type(self).__name__} {self.name} {self.dtype} blas={self.kernels.provider}>"

"""The NumPy reference handler: always installed, the embedded default.

Every op runs through :class:`~sigma_core.kernels.ArrayKernels` over NumPy
unchanged; other handlers are checked against this one op by op.
"""

from ..handler import Handler


class NumpyHandler(Handler):
    """Reference handler on NumPy (float32 or float64), host memory, BLAS matmul."""

    name = "numpy"

"""The ``cpu`` handler's kernel of ``gelu``: the exact GELU's forward pass in one numba loop.

The portable rule's exact GELU calls SciPy's ``erf``, about 18 ns an element
(8 ms of the baby GPT's ~100 ms step per MLP layer, profiled). Here the forward
pass (Φ(x) saved, x·Φ(x) out) is one loop. numba has no SIMD erf here (no
SVML), so in float32 the loop uses Eigen's rational erf (a degree-13/8 fit on
[-4, 4], clamped outside, within 4e-7 of erf in float32 arithmetic: a few
float32 ulp, and it vectorises); float64 keeps ``math.erf``. The backward pass
stays the rule's: it needs exp(−x²/2), which NumPy computes in SIMD and a numba
loop with libm's scalar exp took twice as long. The tanh approximation runs the
portable rule, whose NumPy tanh is already one vectorised pass.
"""

from __future__ import annotations

import math

from sigma_cpu import FASTMATH, c_contiguous, pick, serial_and_parallel  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)

from .ops import GELU  # noqa: E402

_SQRT_HALF = math.sqrt(0.5)


@numba.njit(inline="always", fastmath=FASTMATH, error_model="numpy")
def _rational_erf(x):
    x = min(max(x, -4.0), 4.0)
    x2 = x * x
    p = x2 * -2.72614225801306e-10 + 2.77068142495902e-08
    p = p * x2 + -2.10102402082508e-06
    p = p * x2 + -5.69250639462346e-05
    p = p * x2 + -7.34990630326855e-04
    p = p * x2 + -2.95459980854025e-03
    p = p * x2 + -1.60960333262415e-02
    q = x2 * -1.45660718464996e-05 + -2.13374055278905e-04
    q = q * x2 + -1.68282697438203e-03
    q = q * x2 + -7.37332916720468e-03
    q = q * x2 + -1.42647390514189e-02
    return x * p / q


@numba.njit(inline="always")
def _libm_erf(x):
    return math.erf(x)


def _compiled(erf, suffix):
    """The forward pass over flat arrays with the given scalar erf, compiled under its own name (numba's disk
    cache keys on the name) as a (serial, parallel) pair for ``sigma_cpu.pick``."""

    def forward(x, out, cdf):
        for i in numba.prange(x.size):
            c = 0.5 + 0.5 * erf(x[i] * _SQRT_HALF)
            cdf[i] = c
            out[i] = x[i] * c

    forward.__qualname__ = f"gelu_forward_{suffix}"
    return serial_and_parallel(forward)


#: The forward pass per dtype: float32 with the rational erf, float64 with libm's.
_FORWARD = {4: _compiled(_rational_erf, "float32"), 8: _compiled(_libm_erf, "float64")}


class FusedGELU(GELU):
    """:class:`~sigmann_attention.ops.GELU` with the exact forward pass in one loop (see the module docstring); the
    portable rule runs the tanh approximation, every backward pass, and buffers the loop was not compiled for."""

    def forward(self, k, x, approximate="tanh"):
        if approximate != "none" or x.dtype.itemsize not in _FORWARD or not c_contiguous(x):
            return super().forward(k, x, approximate)
        out, cdf = k.empty(x.shape), k.empty(x.shape)  # cdf: Φ(x), what the rule's backward pass reads
        pick(_FORWARD[x.dtype.itemsize], x.size)(x.reshape(-1), out.reshape(-1), cdf.reshape(-1))
        return out, cdf

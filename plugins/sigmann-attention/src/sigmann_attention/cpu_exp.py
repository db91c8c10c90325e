"""exp(x) for x ≤ 0 in float32 that numba vectorises: the attention kernel's softmax weights, 16 a SIMD register.

numba has no SIMD exp here (no SVML), so a loop calling ``np.exp`` calls
libm's scalar ``expf`` once an element and cannot be vectorised around it.
:func:`exp32` is Cephes' ``expf``: x = n·ln 2 + r, |r| ≤ ln 2 / 2, e^r by a
degree-7 polynomial (within one float32 ulp of e^x, measured against float64
on 10⁶ random and 10⁵ evenly spaced points in [−87, 0]), times 2⁻ⁿ built
from n's seven bits by selects and products (no bit casts, which numba's
scalar code lacks). Below −87.3 (past float32's
smallest normal number) it returns 0, as exp(−inf) must for hidden scores.
"""

from __future__ import annotations

import math

from sigma_cpu import FASTMATH  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)
import numpy as np  # noqa: E402

_F = np.float32
_LOG2E, _LN2_HI, _LN2_LO = _F(1.44269504088896341), _F(0.693359375), _F(-2.12194440e-4)
_LOWEST = _F(-87.3)


@numba.njit(inline="always", fastmath=FASTMATH, error_model="numpy")
def exp32(x):
    """e^x for x ≤ 0 (a positive x is taken as 0: the callers' arguments are ≤ 0 up to rounding), in float32."""
    y = min(max(x, _LOWEST), _F(0.0))
    n = math.floor(y * _LOG2E + _F(0.5))
    r = y - n * _LN2_HI - n * _LN2_LO
    p = _F(1.9875691500e-4)
    p = p * r + _F(1.3981999507e-3)
    p = p * r + _F(8.3334519073e-3)
    p = p * r + _F(4.1665795894e-2)
    p = p * r + _F(1.6666665459e-1)
    p = p * r + _F(5.0000001201e-1)
    p = p * r * r + r + _F(1.0)
    m = np.int32(-n)  # 0..126: 2⁻ᵐ as the product of 2^(−2ᵏ) over m's set bits
    p *= _F(0.5) if m & 1 else _F(1.0)
    p *= _F(0.25) if m & 2 else _F(1.0)
    p *= _F(0.0625) if m & 4 else _F(1.0)
    p *= _F(0.00390625) if m & 8 else _F(1.0)
    p *= _F(1.52587890625e-05) if m & 16 else _F(1.0)
    p *= _F(2.3283064365386963e-10) if m & 32 else _F(1.0)
    p *= _F(5.421010862427522e-20) if m & 64 else _F(1.0)
    return p if x > _LOWEST else _F(0.0)


@numba.njit(inline="always")
def exp64(x):
    """e^x in float64: libm's (the float64 kernel keeps float64's precision)."""
    return math.exp(x)

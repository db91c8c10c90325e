"""The ``cpu`` handler's kernel of ``lstm_sequence``: the LSTM cell fused into numba loops.

Registered as ``kernels={"cpu": "sigmann_recurrent.cpu:FusedLSTMSequence"}``,
so only the ``cpu`` handler (sigmann-cpu, which brings numba) imports this
module; ``rnn_sequence`` has no kernel of its own and runs its portable rule
there too.

The reference cell spends ~15 NumPy calls per time step on (batch, 4·size)
arrays; here the forward step (bias, gate activations, cell, hidden state)
and the backward step are each one compiled pass over the batch rows, split
between the shared pool's threads (``sigma_cpu.pick``) when it is on. They take
the whole batch-major buffers and the step ``t``, so each row ``[r, t]`` is a
contiguous slice the loops vectorise. The GEMMs (the input projection of all
steps at once, each step's recurrent product forwards and backwards) go to
the handler's provider (``k.matmul_into``: oneMKL when installed, else NumPy's
OpenBLAS), written into the portable rule's preallocated buffers.

numba has no SIMD tanh here (no SVML), and the scalar libm tanh costs ~18 ns
an element, more than the whole NumPy cell. In float32 the loops therefore use
Eigen's rational tanh (a degree-13/6 minimax fit on [-7.9, 7.9], clamped
outside: within a few float32 ulp, and it vectorises); float64 keeps
``math.tanh``. Sigmoid is tanh(x/2)/2 + 1/2, as in the reference kernels.
"""

from __future__ import annotations

import math

from sigma_cpu import FASTMATH, c_contiguous, pick, serial_and_parallel  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)

from .ops import LSTMSequence  # noqa: E402


@numba.njit(inline="always", fastmath=FASTMATH, error_model="numpy")
def _rational_tanh(x):
    x = min(max(x, -7.90531110763549805), 7.90531110763549805)
    x2 = x * x
    p = x2 * -2.76076847742355e-16 + 2.00018790482477e-13
    p = p * x2 + -8.60467152213735e-11
    p = p * x2 + 5.12229709037114e-08
    p = p * x2 + 1.48572235717979e-05
    p = p * x2 + 6.37261928875436e-04
    p = p * x2 + 4.89352455891786e-03
    q = x2 * 1.19825839466702e-06 + 1.18534705686654e-04
    q = q * x2 + 2.26843463243900e-03
    q = q * x2 + 4.89352518554385e-03
    return x * p / q


@numba.njit(inline="always")
def _libm_tanh(x):
    return math.tanh(x)


def _cell_loops(tanh):
    """The forward and backward cell passes over rows of (B, 4H) gates, with the given scalar tanh."""

    def forward(gates, t, z, b, c_prev, c, hs):
        n = hs.shape[2]
        bi, bf, bg, bo = b[:n], b[n : 2 * n], b[2 * n : 3 * n], b[3 * n :]
        for r in numba.prange(hs.shape[0]):
            a = gates[r, t]
            ai, af, ag, ao = a[:n], a[n : 2 * n], a[2 * n : 3 * n], a[3 * n :]
            zi, zf, zg, zo = z[r, :n], z[r, n : 2 * n], z[r, 2 * n : 3 * n], z[r, 3 * n :]
            cp, cr, hr = c_prev[r], c[r], hs[r, t]
            for j in range(n):
                i = 0.5 * tanh(0.5 * (ai[j] + zi[j] + bi[j])) + 0.5
                f = 0.5 * tanh(0.5 * (af[j] + zf[j] + bf[j])) + 0.5
                g = tanh(ag[j] + zg[j] + bg[j])
                o = 0.5 * tanh(0.5 * (ao[j] + zo[j] + bo[j])) + 0.5
                cell = f * cp[j] + i * g
                cr[j] = cell
                hr[j] = o * tanh(cell)
                ai[j], af[j], ag[j], ao[j] = i, f, g, o

    def backward(gates, t, c_prev, c, dh, dc):
        n = dh.shape[1]
        for r in numba.prange(dh.shape[0]):
            a = gates[r, t]
            ai, af, ag, ao = a[:n], a[n : 2 * n], a[2 * n : 3 * n], a[3 * n :]
            cp, cr, dhr, dcr = c_prev[r], c[r], dh[r], dc[r]
            for j in range(n):
                i, f, g, o = ai[j], af[j], ag[j], ao[j]
                tc = tanh(cr[j])
                d_c = dcr[j] + dhr[j] * o * (1 - tc * tc)
                ai[j] = d_c * g * i * (1 - i)
                af[j] = d_c * cp[j] * f * (1 - f)
                ag[j] = d_c * i * (1 - g * g)
                ao[j] = dhr[j] * tc * o * (1 - o)
                dcr[j] = d_c * f

    return forward, backward


def _compiled(tanh, suffix):
    """:func:`_cell_loops` compiled under distinct names (numba's disk cache keys on the name), each as a
    (serial, parallel over rows) pair for ``sigma_cpu.pick``."""
    loops = []
    for loop in _cell_loops(tanh):
        loop.__qualname__ = f"lstm_cell_{loop.__name__}_{suffix}"
        loops.append(serial_and_parallel(loop))
    return loops


#: (forward, backward) pairs per dtype: float32 with the rational tanh, float64 with libm's.
_CELLS = {4: _compiled(_rational_tanh, "float32"), 8: _compiled(_libm_tanh, "float64")}


class FusedLSTMSequence(LSTMSequence):
    """:class:`~sigmann_recurrent.ops.LSTMSequence` with the cell fused (see the module docstring); the portable
    cell runs where the buffers are not what the loops were compiled for."""

    @staticmethod
    def product(k, a, b, out):
        """Through the ``cpu`` handler's GEMM provider: oneMKL when it is the provider (strided step slices
        included), NumPy's OpenBLAS otherwise."""
        k.matmul_into(a, b, out)

    def cell(self, k, gates, t, z, b, c_prev, c, hs):
        if gates.dtype.itemsize not in _CELLS or not c_contiguous(gates, z, b, c_prev, c, hs):
            return super().cell(k, gates, t, z, b, c_prev, c, hs)
        pick(_CELLS[gates.dtype.itemsize][0], z.size)(gates, t, z, b, c_prev, c, hs)

    def cell_backward(self, k, gates, t, c_prev, c, dh, dc, scratch):
        if gates.dtype.itemsize not in _CELLS or not c_contiguous(gates, c_prev, c, dh, dc):
            return super().cell_backward(k, gates, t, c_prev, c, dh, dc, scratch)
        pick(_CELLS[gates.dtype.itemsize][1], scratch.size)(gates, t, c_prev, c, dh, dc)

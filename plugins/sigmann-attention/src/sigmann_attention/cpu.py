"""The ``cpu`` handler's kernel of ``attention``: flash-attention's tiling and online softmax in numba loops.

Registered as ``kernels={"cpu": "sigmann_attention.cpu:FlashAttention"}``, so
only the ``cpu`` handler (sigmann-cpu, which brings numba) imports this module.

The portable rule keeps every head's (T, T) softmax weights for the backward
pass: at T = 1024, 4 MiB per head in float32, quadratic in T. Here
(Dao et al., FlashAttention, 2022) each head's queries go through the keys
one block of :data:`BLOCK` keys at a time, holding a running maximum, the
running sum of exponentials and the running weighted sum of values per query
(the online softmax), so at most one (BLOCK, BLOCK) tile of scores exists per
head. Only the output and one log-sum-exp per query are saved; the backward
pass recomputes each weight from them, walking the key blocks with each
block's key and value gradients held locally while every query that sees the
block passes (so they stay in cache). Heads are independent: the loops run
over (batch, head) pairs, split between the shared pool's threads
(``sigma_cpu.pick``) when it is on.

Sequences of at most :data:`BLOCK` positions are one tile already, so the
portable rule holds no more than the loops would; it also runs faster there
(benchmarks/attention.py: the rule is faster up to T = 256, the loops at
T = 1024). The likely reason, not yet profiled: the rule's exponentials are
NumPy's SIMD ones, the loops' libm's scalar ``exp`` (numba has no SVML here).
Dropout in training needs the weights' random mask in both passes, so
training with ``dropout > 0`` (and buffers the loops were not compiled for)
runs the portable rule too.
"""

from __future__ import annotations

import numpy as np

from sigma_cpu import c_contiguous, pick, serial_and_parallel  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)

from .ops import Attention  # noqa: E402

#: Keys (and queries) per tile: a (64, 64) tile of scores is 16 KiB in float32, well inside a core's L2 with the
#: key and value rows it pairs.
BLOCK = 64


@numba.njit(inline="always")
def _hidden(causal, masked, keep, b, i, j):
    """Whether query i of batch row b may not see key j: after it (causal), or padding."""
    return (causal and j > i) or (masked and keep[b, j] == 0)


def _forward(qkv, keep, masked, heads, causal, scale, out, lse):
    """out[b, i, head] = Σ_j softmax_j(q_i·k_j·scale) v_j, key block by key block; lse[b, h, i] = log Σ_j exp(...).

    Each tile's scores and weighted values are small GEMMs (numba's np.dot: BLAS) on contiguous copies of the
    block's rows; the mask and the online softmax are loops over the tile."""
    batch, steps, width3 = qkv.shape
    width = width3 // 3
    d = width // heads
    for pair in numba.prange(batch * heads):
        b, h = pair // heads, pair % heads
        qo, ko, vo = h * d, width + h * d, 2 * width + h * d
        for i0 in range(0, steps, BLOCK):
            rows = min(BLOCK, steps - i0)
            q = np.ascontiguousarray(qkv[b, i0 : i0 + rows, qo : qo + d]) * scale
            top = np.full(rows, -np.inf, qkv.dtype)  # each query's running maximum,
            total = np.zeros(rows, qkv.dtype)  # the sum of exp(score − maximum),
            acc = np.zeros((rows, d), qkv.dtype)  # and the values weighted by them
            end = i0 + rows if causal else steps
            for j0 in range(0, end, BLOCK):
                cols = min(BLOCK, end - j0)
                k = np.ascontiguousarray(qkv[b, j0 : j0 + cols, ko : ko + d])
                v = np.ascontiguousarray(qkv[b, j0 : j0 + cols, vo : vo + d])
                scores = np.dot(q, k.T)  # the one tile of this head's scores
                for r in range(rows):
                    i = i0 + r
                    block_top = top[r]
                    for c in range(cols):
                        if _hidden(causal, masked, keep, b, i, j0 + c):
                            scores[r, c] = -np.inf
                        elif scores[r, c] > block_top:
                            block_top = scores[r, c]
                    if block_top == -np.inf:  # nothing visible yet: weights 0
                        scores[r, :] = 0
                        continue
                    shrink = np.exp(top[r] - block_top)  # what came before, rescaled to the new maximum
                    total[r] *= shrink
                    acc[r, :] *= shrink
                    for c in range(cols):
                        scores[r, c] = np.exp(scores[r, c] - block_top)  # exp(−inf) = 0 where hidden
                        total[r] += scores[r, c]
                    top[r] = block_top
                acc += np.dot(scores, v)
            for r in range(rows):
                i = i0 + r
                if total[r] > 0:
                    out[b, i, qo : qo + d] = acc[r] / total[r]
                    lse[b, h, i] = top[r] + np.log(total[r])
                else:  # every key hidden: zeros, and weights exp(s − inf) = 0 in the backward pass
                    out[b, i, qo : qo + d] = 0
                    lse[b, h, i] = np.inf


def _backward(qkv, keep, masked, heads, causal, scale, out, g, lse, grad):
    """``grad`` becomes d qkv: per tile, the weights P = exp(Q·Kᵀ·scale − lse) recomputed, then dV += Pᵀ·dO,
    dS = P ⊙ (dO·Vᵀ − rowsum(dO ⊙ O))·scale, dQ += dS·K, dK += dSᵀ·Q, the GEMMs through np.dot."""
    batch, steps, width3 = qkv.shape
    width = width3 // 3
    d = width // heads
    for pair in numba.prange(batch * heads):
        b, h = pair // heads, pair % heads
        qo, ko, vo = h * d, width + h * d, 2 * width + h * d
        q = np.ascontiguousarray(qkv[b, :, qo : qo + d])  # this head's rows: (T, d), linear in T
        k = np.ascontiguousarray(qkv[b, :, ko : ko + d])
        v = np.ascontiguousarray(qkv[b, :, vo : vo + d])
        go = np.ascontiguousarray(g[b, :, qo : qo + d])
        delta = (go * out[b, :, qo : qo + d]).sum(axis=1)  # rowsum(dO ⊙ O): the softmax VJP's row term
        dq = np.zeros((steps, d), qkv.dtype)
        for j0 in range(0, steps, BLOCK):
            cols = min(BLOCK, steps - j0)
            kb, vb = k[j0 : j0 + cols], v[j0 : j0 + cols]
            dk = np.zeros((cols, d), qkv.dtype)
            dv = np.zeros((cols, d), qkv.dtype)
            for i0 in range(j0 if causal else 0, steps, BLOCK):  # causal: earlier queries see none of these keys
                rows = min(BLOCK, steps - i0)
                qb, gb = q[i0 : i0 + rows], go[i0 : i0 + rows]
                p = np.dot(qb, kb.T)
                dp = np.dot(gb, vb.T)
                for r in range(rows):
                    i = i0 + r
                    for c in range(cols):
                        if _hidden(causal, masked, keep, b, i, j0 + c):
                            p[r, c] = 0
                        else:
                            p[r, c] = np.exp(p[r, c] * scale - lse[b, h, i])  # 0 where lse is inf
                        dp[r, c] = p[r, c] * (dp[r, c] - delta[i]) * scale  # now dS
                dv += np.dot(p.T, gb)
                dq[i0 : i0 + rows] += np.dot(dp, kb)
                dk += np.dot(dp.T, qb)
            grad[b, j0 : j0 + cols, ko : ko + d] = dk
            grad[b, j0 : j0 + cols, vo : vo + d] = dv
        grad[b, :, qo : qo + d] = dq


_FORWARD, _BACKWARD = serial_and_parallel(_forward), serial_and_parallel(_backward)


class FlashAttention(Attention):
    """:class:`~sigmann_attention.ops.Attention` tiled (see the module docstring); the portable rule runs sequences
    of one tile, dropout in training, and buffers the loops were not compiled for."""

    def __init__(self):
        self.everyone = None  # a (1, 1) mask the loops are given, and never read, when there is none

    def tiled(self, qkv, mask, dropout, training):
        return (qkv.shape[1] > BLOCK and qkv.dtype.itemsize in (4, 8) and not (training and dropout)
                and c_contiguous(qkv, *([] if mask is None else [mask])))

    def forward(self, k, qkv, mask=None, heads=1, causal=True, dropout=0.0, training=False):
        """Saved: the log-sum-exp of every query's scores (batch, heads, T), where the rule saves (T, T) weights."""
        if not self.tiled(qkv, mask, dropout, training):
            return super().forward(k, qkv, mask, heads, causal, dropout, training)
        if self.everyone is None:
            self.everyone = k.full((1, 1), 1.0)
        batch, steps, width3 = qkv.shape
        out, lse = k.empty((batch, steps, width3 // 3)), k.empty((batch, heads, steps))
        keep = self.everyone if mask is None else mask.astype(k.dtype, copy=False)
        scale = k.dtype.type(1.0 / np.sqrt(width3 // (3 * heads)))  # in the dtype: a float64 would promote the tiles
        pick(_FORWARD, qkv.size * steps)(qkv, keep, mask is not None, heads, causal, scale, out, lse)
        return out, lse

    def backward(self, k, g, inputs, out, saved, needs, heads=1, causal=True, dropout=0.0, training=False):
        if isinstance(saved, tuple):  # the portable rule's (weights, kept): it ran the forward pass
            return super().backward(k, g, inputs, out, saved, needs, heads, causal, dropout, training)
        qkv, mask = inputs[0], (inputs[1] if len(inputs) > 1 else None)
        grad = k.empty(qkv.shape)
        keep = self.everyone if mask is None else mask.astype(k.dtype, copy=False)
        scale = k.dtype.type(1.0 / np.sqrt(qkv.shape[2] // (3 * heads)))
        g = np.ascontiguousarray(g)
        pick(_BACKWARD, qkv.size * qkv.shape[1])(qkv, keep, mask is not None, heads, causal, scale, out, g, saved,
                                                 grad)
        d_mask = k.full(mask.shape, 0.0) if mask is not None and needs[1] else None
        return (grad, d_mask)[: len(inputs)]

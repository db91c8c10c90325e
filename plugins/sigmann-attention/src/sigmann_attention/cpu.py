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

In float32 the softmax's exponentials are :func:`sigmann_attention.cpu_exp.exp32`
(vectorisable; libm's scalar ``expf`` takes ~2.6 ns an element here, it ~1.2)
and a tile's rows run branch-free where no key of the tile is hidden, so
those loops vectorise; each head's keys and values are copied out once, not
once per query block. That took the op from 1.50x to ~1.3x PyTorch's SDPA at
T = 256 and from 1.63x to ~1.3x at T = 1024 (BENCHMARKS.md); where the rest
goes is not profiled yet (the suspects: the tiles' many small GEMMs through
numba's ``np.dot``, each with its own result array). Sequences of at most :data:`BLOCK`
positions are one tile already, so the portable rule holds no more than the
loops would, and runs faster there (at T = 64, batch 12: 2.0 ms against the
loops' 3.3 ms). Dropout in training needs the weights' random mask in both passes, so
training with ``dropout > 0`` (and buffers the loops were not compiled for)
runs the portable rule too.
"""

from __future__ import annotations

import numpy as np

from sigma_cpu import c_contiguous, pick, serial_and_parallel  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)

from .cpu_exp import exp32, exp64  # noqa: E402
from .ops import Attention  # noqa: E402

#: Keys (and queries) per tile: a (64, 64) tile of scores is 16 KiB in float32, well inside a core's L2 with the
#: key and value rows it pairs.
BLOCK = 64


@numba.njit(inline="always")
def _hidden(causal, masked, keep, b, i, j):
    """Whether query i of batch row b may not see key j: after it (causal), or padding."""
    return (causal and j > i) or (masked and keep[b, j] == 0)


@numba.njit(inline="always")
def _head(pair, heads, width):
    """For the pair-th (batch row, head): the two, the head's width and where its queries, keys and values start in
    a row of qkv."""
    d = width // heads
    h = pair % heads
    return pair // heads, h, d, h * d, width + h * d, 2 * width + h * d


def _compiled(exp, suffix):
    """The forward and backward loops with the scalar ``exp`` given (:mod:`sigmann_attention.cpu_exp`), compiled
    under their own names (numba's disk cache keys on the name), each a (serial, parallel) pair for ``pick``."""

    def forward(qkv, keep, masked, heads, causal, scale, out, lse):
        """out[b, i, head] = Σ_j softmax_j(q_i·k_j·scale) v_j, key block by key block; lse[b, h, i] = log Σ_j
        exp(...). Each tile's scores and weighted values are small GEMMs (numba's np.dot: BLAS) on contiguous
        copies of the block's rows; the mask and the online softmax are loops over the tile's rows, branch-free
        (so vectorised) on the tiles no key of which is hidden."""
        batch, steps, width3 = qkv.shape
        for pair in numba.prange(batch * heads):
            b, h, d, qo, ko, vo = _head(pair, heads, width3 // 3)
            keys = np.ascontiguousarray(qkv[b, :, ko : ko + d])  # this head's keys and values, (T, d) each:
            values = np.ascontiguousarray(qkv[b, :, vo : vo + d])  # copied once, not once per query block
            for i0 in range(0, steps, BLOCK):
                rows = min(BLOCK, steps - i0)
                q = np.ascontiguousarray(qkv[b, i0 : i0 + rows, qo : qo + d]) * scale
                top = np.full(rows, -np.inf, qkv.dtype)  # each query's running maximum,
                total = np.zeros(rows, qkv.dtype)  # the sum of exp(score − maximum),
                acc = np.zeros((rows, d), qkv.dtype)  # and the values weighted by them
                end = i0 + rows if causal else steps
                for j0 in range(0, end, BLOCK):
                    cols = min(BLOCK, end - j0)
                    k, v = keys[j0 : j0 + cols], values[j0 : j0 + cols]
                    scores = np.dot(q, k.T)  # the one tile of this head's scores
                    full = not masked and (not causal or j0 + cols <= i0 + 1)  # no key hidden from any query
                    for r in range(rows):
                        i = i0 + r
                        if not full:
                            for c in range(cols):
                                if _hidden(causal, masked, keep, b, i, j0 + c):
                                    scores[r, c] = -np.inf
                        block_top = top[r]
                        for c in range(cols):
                            block_top = max(block_top, scores[r, c])
                        if block_top == -np.inf:  # nothing visible yet: weights 0
                            scores[r, :] = 0
                            continue
                        shrink = exp(top[r] - block_top)  # what came before, rescaled to the new maximum
                        acc[r, :] *= shrink
                        running = total[r] * shrink
                        for c in range(cols):
                            e = exp(scores[r, c] - block_top)  # exp(−inf) = 0 where hidden
                            scores[r, c] = e
                            running += e
                        total[r] = running
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

    def backward(qkv, keep, masked, heads, causal, scale, out, g, lse, grad):
        """``grad`` becomes d qkv: per tile, the weights P = exp(Q·Kᵀ·scale − lse) recomputed, then dV += Pᵀ·dO,
        dS = P ⊙ (dO·Vᵀ − rowsum(dO ⊙ O))·scale, dQ += dS·K, dK += dSᵀ·Q, the GEMMs through np.dot."""
        batch, steps, width3 = qkv.shape
        for pair in numba.prange(batch * heads):
            b, h, d, qo, ko, vo = _head(pair, heads, width3 // 3)
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
                for i0 in range(j0 if causal else 0, steps, BLOCK):  # causal: earlier queries see none of these
                    rows = min(BLOCK, steps - i0)
                    qb, gb = q[i0 : i0 + rows], go[i0 : i0 + rows]
                    p = np.dot(qb, kb.T)
                    dp = np.dot(gb, vb.T)
                    full = not masked and (not causal or j0 + cols <= i0 + 1)
                    for r in range(rows):
                        i = i0 + r
                        row_lse, row_delta = lse[b, h, i], delta[i]
                        for c in range(cols):
                            if not full and _hidden(causal, masked, keep, b, i, j0 + c):
                                p[r, c] = 0
                                dp[r, c] = 0
                            else:
                                w = exp(p[r, c] * scale - row_lse)  # 0 where lse is inf
                                p[r, c] = w
                                dp[r, c] = w * (dp[r, c] - row_delta) * scale  # now dS
                    dv += np.dot(p.T, gb)
                    dq[i0 : i0 + rows] += np.dot(dp, kb)
                    dk += np.dot(dp.T, qb)
                grad[b, j0 : j0 + cols, ko : ko + d] = dk
                grad[b, j0 : j0 + cols, vo : vo + d] = dv
            grad[b, :, qo : qo + d] = dq

    forward.__qualname__, backward.__qualname__ = f"attention_forward_{suffix}", f"attention_backward_{suffix}"
    return serial_and_parallel(forward), serial_and_parallel(backward)


#: The (forward, backward) loops per itemsize: float32 with the vectorisable exp, float64 with libm's.
_LOOPS = {4: _compiled(exp32, "float32"), 8: _compiled(exp64, "float64")}


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
        pick(_LOOPS[qkv.dtype.itemsize][0], qkv.size * steps)(qkv, keep, mask is not None, heads, causal, scale, out,
                                                               lse)
        return out, lse

    def backward(self, k, g, inputs, out, saved, needs, heads=1, causal=True, dropout=0.0, training=False):
        if isinstance(saved, tuple):  # the portable rule's (weights, kept): it ran the forward pass
            return super().backward(k, g, inputs, out, saved, needs, heads, causal, dropout, training)
        qkv, mask = inputs[0], (inputs[1] if len(inputs) > 1 else None)
        grad = k.empty(qkv.shape)
        keep = self.everyone if mask is None else mask.astype(k.dtype, copy=False)
        scale = k.dtype.type(1.0 / np.sqrt(qkv.shape[2] // (3 * heads)))
        g = np.ascontiguousarray(g)
        pick(_LOOPS[qkv.dtype.itemsize][1], qkv.size * qkv.shape[1])(qkv, keep, mask is not None, heads, causal, scale,
                                                                      out, g, saved, grad)
        d_mask = k.full(mask.shape, 0.0) if mask is not None and needs[1] else None
        return (grad, d_mask)[: len(inputs)]

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

Dropout in training needs the weights' random mask in both passes, so
training with ``dropout > 0`` (and buffers the loops were not compiled for)
runs the portable rule.
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
    """out[b, i, head] = Σ_j softmax_j(q_i·k_j·scale) v_j, key block by key block; lse[b, h, i] = log Σ_j exp(...)."""
    batch, steps, width3 = qkv.shape
    width = width3 // 3
    d = width // heads
    for pair in numba.prange(batch * heads):
        b, h = pair // heads, pair % heads
        qo, ko, vo = h * d, width + h * d, 2 * width + h * d
        scores = np.empty((BLOCK, BLOCK), qkv.dtype)  # the one tile of this head's scores
        acc = np.empty((BLOCK, d), qkv.dtype)
        top = np.empty(BLOCK, qkv.dtype)
        total = np.empty(BLOCK, qkv.dtype)
        for i0 in range(0, steps, BLOCK):
            rows = min(BLOCK, steps - i0)
            top[:] = -np.inf
            total[:] = 0
            acc[:] = 0
            for j0 in range(0, min(i0 + rows, steps) if causal else steps, BLOCK):
                cols = min(BLOCK, steps - j0)
                for r in range(rows):
                    i = i0 + r
                    q = qkv[b, i, qo : qo + d]
                    block_top = top[r]
                    for c in range(cols):
                        j = j0 + c
                        if _hidden(causal, masked, keep, b, i, j):
                            scores[r, c] = -np.inf
                            continue
                        k = qkv[b, j, ko : ko + d]
                        dot = q[0] * k[0]
                        for e in range(1, d):
                            dot += q[e] * k[e]
                        scores[r, c] = dot * scale
                        block_top = max(block_top, scores[r, c])
                    if block_top == -np.inf:  # no key of this block is visible to query i
                        continue
                    shrink = np.exp(top[r] - block_top)  # rescale what came before to the new maximum
                    total[r] *= shrink
                    for e in range(d):
                        acc[r, e] *= shrink
                    for c in range(cols):
                        if scores[r, c] != -np.inf:
                            p = np.exp(scores[r, c] - block_top)
                            total[r] += p
                            v = qkv[b, j0 + c, vo : vo + d]
                            for e in range(d):
                                acc[r, e] += p * v[e]
                    top[r] = block_top
            for r in range(rows):
                i = i0 + r
                if total[r] > 0:
                    for e in range(d):
                        out[b, i, qo + e] = acc[r, e] / total[r]
                    lse[b, h, i] = top[r] + np.log(total[r])
                else:  # every key hidden: zeros, and weights exp(s − inf) = 0 in the backward pass
                    for e in range(d):
                        out[b, i, qo + e] = 0
                    lse[b, h, i] = np.inf


def _backward(qkv, keep, masked, heads, causal, scale, out, g, lse, grad):
    """``grad`` (zeros on entry) becomes d qkv: each weight p = exp(q·k·scale − lse) recomputed, then
    dv_j += p·g_i, ds = p·(g_i·v_j − g_i·out_i)·scale, dq_i += ds·k_j, dk_j += ds·q_i."""
    batch, steps, width3 = qkv.shape
    width = width3 // 3
    d = width // heads
    for pair in numba.prange(batch * heads):
        b, h = pair // heads, pair % heads
        qo, ko, vo = h * d, width + h * d, 2 * width + h * d
        delta = np.empty(steps, qkv.dtype)  # g_i·out_i: the softmax VJP's row term
        for i in range(steps):
            gi, oi = g[b, i, qo : qo + d], out[b, i, qo : qo + d]
            s = gi[0] * oi[0]
            for e in range(1, d):
                s += gi[e] * oi[e]
            delta[i] = s
        dk = np.empty((BLOCK, d), qkv.dtype)
        dv = np.empty((BLOCK, d), qkv.dtype)
        for j0 in range(0, steps, BLOCK):
            cols = min(BLOCK, steps - j0)
            dk[:] = 0
            dv[:] = 0
            for i in range(j0 if causal else 0, steps):
                if lse[b, h, i] == np.inf:
                    continue
                q, gi = qkv[b, i, qo : qo + d], g[b, i, qo : qo + d]
                dq = grad[b, i, qo : qo + d]
                for c in range(cols):
                    j = j0 + c
                    if _hidden(causal, masked, keep, b, i, j):
                        continue
                    k, v = qkv[b, j, ko : ko + d], qkv[b, j, vo : vo + d]
                    dot = q[0] * k[0]
                    dp = gi[0] * v[0]
                    for e in range(1, d):
                        dot += q[e] * k[e]
                        dp += gi[e] * v[e]
                    p = np.exp(dot * scale - lse[b, h, i])
                    ds = p * (dp - delta[i]) * scale
                    for e in range(d):
                        dv[c, e] += p * gi[e]
                        dq[e] += ds * k[e]
                        dk[c, e] += ds * q[e]
            for c in range(cols):
                for e in range(d):
                    grad[b, j0 + c, ko + e] = dk[c, e]
                    grad[b, j0 + c, vo + e] = dv[c, e]


_FORWARD, _BACKWARD = serial_and_parallel(_forward), serial_and_parallel(_backward)


class FlashAttention(Attention):
    """:class:`~sigmann_attention.ops.Attention` tiled (see the module docstring); the portable rule runs where
    dropout is on in training or the buffers are not what the loops were compiled for."""

    def __init__(self):
        self.everyone = None  # a (1, 1) mask the loops are given, and never read, when there is none

    def tiled(self, qkv, mask, dropout, training):
        return (qkv.dtype.itemsize in (4, 8) and not (training and dropout)
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
        scale = 1.0 / np.sqrt(width3 // (3 * heads))
        pick(_FORWARD, qkv.size * steps)(qkv, keep, mask is not None, heads, causal, scale, out, lse)
        return out, lse

    def backward(self, k, g, inputs, out, saved, needs, heads=1, causal=True, dropout=0.0, training=False):
        if isinstance(saved, tuple):  # the portable rule's (weights, kept): it ran the forward pass
            return super().backward(k, g, inputs, out, saved, needs, heads, causal, dropout, training)
        qkv, mask = inputs[0], (inputs[1] if len(inputs) > 1 else None)
        grad = k.full(qkv.shape, 0.0)
        keep = self.everyone if mask is None else mask.astype(k.dtype, copy=False)
        scale = 1.0 / np.sqrt(qkv.shape[2] // (3 * heads))
        g = np.ascontiguousarray(g)
        pick(_BACKWARD, qkv.size * qkv.shape[1])(qkv, keep, mask is not None, heads, causal, scale, out, g, saved,
                                                 grad)
        d_mask = k.full(mask.shape, 0.0) if mask is not None and needs[1] else None
        return (grad, d_mask)[: len(inputs)]

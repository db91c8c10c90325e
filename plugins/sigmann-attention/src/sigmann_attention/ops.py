"""The transformer's ops: ``embedding``, ``gelu`` and ``attention``, each a forward rule and its VJP over ``k.xp``.

They run on every handler (the ``cpu`` handler runs :mod:`sigmann_attention.cpu`'s
tiled attention instead of :class:`Attention`'s rule). Written as ops rather than
handler ops because the tape would otherwise record a dozen small ops per
attention head (mask, softmax, dropout, two batched products) and keep every
intermediate; here one record keeps what the backward pass needs.

Every array an op returns or saves comes from ``k.empty``/``k.full``: a recorded
step (sigmann-replay) replays the rule on the same buffers.
"""

from __future__ import annotations

import math

from sigma_core import Op, ShapeError


def _shape(a) -> tuple:
    return getattr(a, "shape", ())  # a Python number has shape ()


class Embedding(Op):
    """Rows of ``weights`` (vocabulary, width) picked by token ids (any shape): out[..., :] = weights[ids[...]].

    The ids may be integers or whole-number floats (``Network.predict`` sends floats); they are rounded to the
    nearest integer, so the finite differences of the conformance kit (ids ± 1e-6) pick the same rows. The
    gradient scatters each position's row into the rows it used (``add.at``), never a one-hot product; the ids
    have none (zero).
    """

    def check(self, inputs, params):
        shapes = [_shape(a) for a in inputs]
        if len(shapes) != 2 or len(shapes[1]) != 2 or not shapes[0]:
            raise ShapeError(f"embedding: takes ids (any shape) and weights (vocabulary, width); got shapes {shapes}")
        ids, vocabulary = inputs[0], shapes[1][0]
        if ids.size:
            low, high = float(ids.min()), float(ids.max())  # one pass each; on a GPU, one sync per step
            if low <= -0.5 or high >= vocabulary - 0.5:
                bad = low if low <= -0.5 else high
                raise ShapeError(f"embedding: token id {bad:g} is outside the vocabulary 0..{vocabulary - 1}")

    def forward(self, k, ids, weights):
        """Saved: the ids as integers (a buffer of their own, for the scatter)."""
        xp = k.xp
        rows = k.empty(ids.shape, dtype="intp")  # a dtype name: every array module reads it
        if ids.dtype.kind == "f":
            xp.rint(ids, out=rows, casting="unsafe")
        else:
            rows[...] = ids
        out = k.empty((*ids.shape, weights.shape[1]))
        xp.take(weights, rows, axis=0, out=out)
        return out, rows

    def backward(self, k, g, inputs, out, rows, needs):
        ids, weights = inputs
        d_ids = k.full(ids.shape, 0.0) if needs[0] else None
        d_weights = None
        if needs[1]:
            d_weights = k.scatter_add(weights.shape, rows.reshape(-1), g.reshape(-1, weights.shape[1]))
        return d_ids, d_weights

    def examples(self):
        """A repeated id (rows that add up), every id used once, and (2, 3) ids: the scatter's three regimes."""
        return [
            ("repeated", lambda rng: [[[0, 2, 2], [3, 0, 2]], rng.standard_normal((4, 3))], {}),
            ("each-once", lambda rng: [[3, 1, 0, 2], rng.standard_normal((4, 2))], {}),
            ("unused-rows", lambda rng: [[[5], [5]], rng.standard_normal((6, 2))], {}),
        ]


#: √(2/π), the tanh approximation's scale (Hendrycks & Gimpel), and its cubic coefficient.
_TANH_SCALE, _CUBIC = math.sqrt(2.0 / math.pi), 0.044715


def erf(k, x, out):
    """``out`` = erf(x) on the handler's array module: SciPy's for NumPy (which has none), cupyx's for CuPy, and
    through the host (SciPy's, one copy each way) for an array module with neither."""
    from scipy.special import erf as host_erf

    if k.xp.__name__ == "numpy":
        host_erf(x, out=out)
        return
    try:
        from cupyx.scipy.special import erf as device_erf
    except ImportError:
        out[...] = k.asarray(host_erf(k.to_host(x)))
        return
    device_erf(x, out=out)


class GELU(Op):
    """x·Φ(x), Φ the standard normal CDF: ``approximate="tanh"`` (GPT-2's, PyTorch's ``approximate="tanh"``) or
    ``"none"`` (the exact erf form, PyTorch's default)."""

    def check(self, inputs, params):
        if len(inputs) != 1:
            raise ShapeError(f"gelu: takes one input, got {len(inputs)}")
        if params.get("approximate", "tanh") not in ("tanh", "none"):
            raise ShapeError(f"gelu: approximate must be \"tanh\" or \"none\", got {params['approximate']!r}")

    def forward(self, k, x, approximate="tanh"):
        """Saved: Φ(x) (exact) or tanh(√(2/π)(x + 0.044715x³)) (tanh), from which the derivative follows."""
        xp = k.xp
        saved, out = k.empty(x.shape), k.empty(x.shape)
        if approximate == "tanh":
            xp.multiply(x, x, out=saved)
            xp.multiply(saved, _CUBIC, out=saved)
            xp.add(saved, 1.0, out=saved)
            xp.multiply(saved, x, out=saved)
            xp.multiply(saved, _TANH_SCALE, out=saved)
            xp.tanh(saved, out=saved)
            xp.add(saved, 1.0, out=out)
            xp.multiply(out, 0.5, out=out)
        else:
            xp.multiply(x, 1.0 / math.sqrt(2.0), out=saved)
            erf(k, saved, saved)
            xp.add(saved, 1.0, out=saved)
            xp.multiply(saved, 0.5, out=saved)
            out[...] = saved
        xp.multiply(out, x, out=out)
        return out, saved

    def backward(self, k, g, inputs, out, saved, needs, approximate="tanh"):
        xp, (x,) = k.xp, inputs
        grad = k.empty(x.shape)
        if approximate == "tanh":  # ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²), t the saved tanh
            tmp = k.empty(x.shape)
            xp.multiply(x, x, out=tmp)
            xp.multiply(tmp, 3 * _CUBIC * _TANH_SCALE, out=tmp)
            xp.add(tmp, _TANH_SCALE, out=tmp)
            xp.multiply(tmp, x, out=tmp)
            xp.multiply(saved, saved, out=grad)
            xp.subtract(1.0, grad, out=grad)
            xp.multiply(grad, tmp, out=grad)
            xp.add(grad, saved, out=grad)
            xp.add(grad, 1.0, out=grad)
            xp.multiply(grad, 0.5, out=grad)
        else:  # Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π)
            xp.multiply(x, x, out=grad)
            xp.multiply(grad, -0.5, out=grad)
            xp.exp(grad, out=grad)
            xp.multiply(grad, x, out=grad)
            xp.multiply(grad, 1.0 / math.sqrt(2.0 * math.pi), out=grad)
            xp.add(grad, saved, out=grad)
        xp.multiply(grad, g, out=grad)
        return (grad,)

    def examples(self):
        return [(f"gelu-{a}", lambda rng: [rng.standard_normal((3, 5)) * 2], {"approximate": a})
                for a in ("tanh", "none")]


class Attention(Op):
    """Scaled dot-product attention of every head, from the packed projections of a sequence.

    Inputs: ``qkv`` (batch, T, 3·width), the queries, keys and values side by side, each ``heads`` slices of
    width/heads (what one dense layer of 3·width outputs gives); optionally ``mask`` (batch, T), nonzero where a
    position is a real token (keys at zero positions are never attended to). Output (batch, T, width): each
    head's softmax(q·kᵀ/√d)·v in its slice. ``causal`` hides the keys after each query; ``dropout`` (training
    only) zeroes attention weights with that probability and scales the rest by 1/(1 − p). A query with no key
    to attend to (all masked) outputs zeros rather than NaN.

    This rule materialises the (T, T) scores of every head, which the backward pass reuses;
    :class:`sigmann_attention.cpu.FlashAttention` never holds more than a tile of them.
    """

    def check(self, inputs, params):
        shapes = [_shape(a) for a in inputs]
        heads = params.get("heads", 1)
        qkv = shapes[0] if shapes else ()
        if len(shapes) not in (1, 2) or len(qkv) != 3 or qkv[2] % (3 * heads):
            raise ShapeError(f"attention: takes qkv (batch, T, 3·width) with width divisible by heads = {heads}, "
                             f"and optionally mask (batch, T); got shapes {shapes}")
        if len(shapes) == 2 and shapes[1] != qkv[:2]:
            raise ShapeError(f"attention: mask shape {shapes[1]} is not qkv's (batch, T) {qkv[:2]}")
        if not 0.0 <= params.get("dropout", 0.0) < 1.0:
            raise ShapeError(f"attention: dropout must be in [0, 1), got {params['dropout']}")

    @staticmethod
    def split(qkv, heads):
        """Views q, k, v (batch, heads, T, d) of the packed projections."""
        batch, steps, width3 = qkv.shape
        by_head = qkv.reshape(batch, steps, 3, heads, width3 // (3 * heads))
        return [by_head[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]

    @staticmethod
    def merged(k, shape, heads):
        """A (batch, T, width) buffer and its (batch, heads, T, d) view, the heads' outputs side by side."""
        out = k.empty(shape)
        return out, out.reshape(shape[0], shape[1], heads, shape[2] // heads).transpose(0, 2, 1, 3)

    @staticmethod
    def hidden(k, steps, mask, causal):
        """Which scores are hidden, broadcastable to (batch, heads, T, T), or None: the keys after each query
        (causal) and the keys at padding positions."""
        xp, hidden = k.xp, None
        if causal:
            hidden = xp.triu(xp.ones((steps, steps), dtype=bool), 1)
        if mask is not None:
            padding = (mask == 0)[:, None, None, :]
            hidden = padding if hidden is None else hidden | padding
        return hidden

    def forward(self, k, qkv, mask=None, heads=1, causal=True, dropout=0.0, training=False):
        """Saved: (weights, kept): the softmax weights (batch, heads, T, T) and, with dropout, the scaled mask."""
        xp = k.xp
        batch, steps, width3 = qkv.shape
        q, key, v = self.split(qkv, heads)
        weights = k.empty((batch, heads, steps, steps))
        xp.matmul(q, key.transpose(0, 1, 3, 2), out=weights)
        xp.multiply(weights, 1.0 / math.sqrt(width3 // (3 * heads)), out=weights)
        hidden = self.hidden(k, steps, mask, causal)
        if hidden is not None:
            xp.copyto(weights, -math.inf, where=hidden)
        top = xp.max(weights, axis=-1, keepdims=True)
        xp.copyto(top, 0.0, where=~xp.isfinite(top))  # a row with every key hidden: exp(−inf − 0) = 0
        xp.subtract(weights, top, out=weights)
        xp.exp(weights, out=weights)
        total = xp.sum(weights, axis=-1, keepdims=True)
        xp.copyto(total, 1.0, where=total == 0)
        xp.divide(weights, total, out=weights)
        kept = None
        if training and dropout:
            kept = k.bernoulli(weights.shape, 1.0 - dropout)
            xp.multiply(kept, 1.0 / (1.0 - dropout), out=kept)
        out, by_head = self.merged(k, (batch, steps, width3 // 3), heads)
        xp.matmul(weights if kept is None else weights * kept, v, out=by_head)  # straight into the heads' slices
        return out, (weights, kept)

    def backward(self, k, g, inputs, out, saved, needs, heads=1, causal=True, dropout=0.0, training=False):
        xp, (weights, kept), qkv = k.xp, saved, inputs[0]
        q, key, v = self.split(qkv, heads)
        scale = 1.0 / math.sqrt(q.shape[-1])
        g_heads = g.reshape(g.shape[0], g.shape[1], heads, -1).transpose(0, 2, 1, 3)
        d_qkv = k.empty(qkv.shape)
        dq, dk, dv = self.split(d_qkv, heads)
        used = weights if kept is None else weights * kept
        xp.matmul(used.transpose(0, 1, 3, 2), g_heads, out=dv)
        d_weights = xp.matmul(g_heads, v.transpose(0, 1, 3, 2))  # the gradient of the weights used
        if kept is not None:
            xp.multiply(d_weights, kept, out=d_weights)
        # softmax's VJP: dS = P ⊙ (dP − rowsum(dP ⊙ P)); hidden scores have P = 0, so dS = 0 there. The row term
        # is rowsum(dO ⊙ O) (Σ_j P_ij·dP_ij = dO_i·Σ_j P_ij v_j, dropout's mask in both): (T, d), not (T, T), a head
        out_heads = out.reshape(g_heads.shape[0], g_heads.shape[2], heads, -1).transpose(0, 2, 1, 3)
        row = xp.sum(g_heads * out_heads, axis=-1, keepdims=True)
        xp.subtract(d_weights, row, out=d_weights)
        xp.multiply(d_weights, weights, out=d_weights)
        xp.multiply(d_weights, scale, out=d_weights)
        xp.matmul(d_weights, key, out=dq)
        xp.matmul(d_weights.transpose(0, 1, 3, 2), q, out=dk)
        d_mask = k.full(inputs[1].shape, 0.0) if len(inputs) > 1 and needs[1] else None
        return (d_qkv, d_mask)[: len(inputs)]

    def examples(self):
        """Causal and full attention, one and two heads, a padding mask that hides a whole query row's keys."""
        def qkv(batch, steps, width):
            return lambda rng: [rng.standard_normal((batch, steps, 3 * width))]

        def masked(rng):
            return [rng.standard_normal((2, 4, 6)), [[1, 1, 1, 0], [0, 1, 1, 1]]]  # batch 1's first query sees none

        return [
            ("causal-2-heads", qkv(2, 4, 4), {"heads": 2}),
            ("full-1-head", qkv(1, 3, 2), {"heads": 1, "causal": False}),
            ("causal-padding", masked, {"heads": 1}),
        ]

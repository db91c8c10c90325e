"""The vision ops: ``conv2d``, ``max_pool2d``, ``avg_pool2d``, ``batch_norm`` and ``layer_norm``.

Each is a :class:`sigma_core.Op`: a forward rule and its VJP written once over
the handler's kernels ``k`` (raw arrays of ``k.xp``, buffers from ``k.empty``
and ``k.full``), so they run on every handler and record one tape entry per
call. Arrays are NCHW. The ``cpu`` handler runs the subclasses in
:mod:`sigmann_vision.cpu`, which replace the window loops (:meth:`Conv2D.im2col`,
:meth:`Conv2D.col2im`, the pooling passes, the normalisation passes) with numba
loops and keep the GEMMs in BLAS.

Convolution is im2col + GEMM. The columns are laid out (C, KH, KW, N, OH, OW),
so that for each group the forward pass, the weight gradient and the column
gradient are each ONE matrix product over the whole batch (weights (O, C/g,
KH, KW) as (g, O/g, C/g·KH·KW) against columns (g, C/g·KH·KW, N·OH·OW)); only
the output (and its gradient) is transposed between (O, N, ·) and NCHW, which
is the smallest array involved. The columns are kept for the weight gradient.

Every array a rule returns or saves is a buffer from ``k.empty``/``k.full``,
written with ``out=``: a recorded step (sigmann-replay) replays the rule on the
same buffers and hands the saved ones to the backward rule it recorded, so a
fresh array saved (a per-channel 1/σ) would be the recording's forever.
Temporaries used and dropped inside one rule may be fresh.

Geometry parameters are plain tuples the layers compute once
(:mod:`sigmann_vision.geometry`): ``stride`` (sh, sw), ``padding`` (top,
bottom, left, right), ``dilation`` (dh, dw), ``kernel`` (kh, kw) for pooling.
"""

from __future__ import annotations

import math

from sigma_core import Op, ShapeError

from .geometry import output_size


def _shape(a):
    return tuple(getattr(a, "shape", ()))


def window(padded, i, j, stride, dilation, out_hw):
    """The view of ``padded`` (N, C, Hp, Wp) that kernel tap (i, j) reads for every output pixel: (N, C, OH, OW)."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    top, left = i * dh, j * dw
    return padded[:, :, top : top + sh * (oh - 1) + 1 : sh, left : left + sw * (ow - 1) + 1 : sw]


def padded_shape(shape, padding):
    n, c, h, w = shape
    return n, c, h + padding[0] + padding[1], w + padding[2] + padding[3]


def pad(k, x, padding, value):
    """``x`` inside a border of ``value`` (a new buffer), or ``x`` itself without padding."""
    if not any(padding):
        return x
    out = k.full(padded_shape(x.shape, padding), value)
    out[:, :, padding[0] : padding[0] + x.shape[2], padding[2] : padding[2] + x.shape[3]] = x
    return out


def crop(k, padded, shape, padding):
    """The gradient of the unpadded input from that of the padded one."""
    if not any(padding):
        return padded
    out = k.empty(shape)
    out[...] = padded[:, :, padding[0] : padding[0] + shape[2], padding[2] : padding[2] + shape[3]]
    return out


def _out_hw(shape, kernel, stride, dilation, padding):
    return (output_size(shape[2], kernel[0], stride[0], dilation[0], padding[0], padding[1]),
            output_size(shape[3], kernel[1], stride[1], dilation[1], padding[2], padding[3]))


class Conv2D(Op):
    """y[n, o] = Σ_c Σ_ij w[o, c, i, j] · x_padded[n, g(o)·C/g + c, s·p + d·(i, j)] (+ b[o]); inputs x, weights[, biases]."""

    def check(self, inputs, params):
        if len(inputs) not in (2, 3):
            raise ShapeError(f"conv2d: takes x, weights[, biases]; got {len(inputs)} inputs")
        x, w = _shape(inputs[0]), _shape(inputs[1])
        groups = params.get("groups", 1)
        if len(x) != 4 or len(w) != 4 or x[1] != w[1] * groups or w[0] % groups:
            raise ShapeError(f"conv2d: x {x} (N, C, H, W) and weights {w} (O, C/groups, KH, KW) do not fit "
                             f"groups = {groups}")
        if len(inputs) == 3 and _shape(inputs[2]) != (w[0],):
            raise ShapeError(f"conv2d: biases {_shape(inputs[2])} do not fit {w[0]} output channels")
        hw = _out_hw(x, w[2:], params.get("stride", (1, 1)), params.get("dilation", (1, 1)),
                     params.get("padding", (0, 0, 0, 0)))
        if min(hw) < 1:
            raise ShapeError(f"conv2d: kernel {w[2:]} does not fit input {x} with these padding and dilation")

    def forward(self, k, x, weights, *biases, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
        """Saved: the columns (C, KH, KW, N, OH, OW)."""
        n, o = x.shape[0], weights.shape[0]
        out_hw = _out_hw(x.shape, weights.shape[2:], stride, dilation, padding)
        cols = self.im2col(k, x, weights.shape[2:], stride, padding, dilation, out_hw)
        depth, pixels = cols.size // (groups * n * out_hw[0] * out_hw[1]), n * out_hw[0] * out_hw[1]
        y = k.empty((o, n) + out_hw)
        self.products(k, weights.reshape(groups, o // groups, depth), cols.reshape(groups, depth, pixels),
                      y.reshape(groups, o // groups, pixels))
        out = k.empty((n, o) + out_hw)
        self.to_nchw(k, y, biases, out)
        return out, cols

    def backward(self, k, g, inputs, out, cols, needs, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
        x, weights = inputs[0], inputs[1]
        n, o = g.shape[:2]
        pixels = g.size // o
        depth = cols.size // (groups * pixels)
        grads = [None] * len(inputs)
        if len(inputs) == 3 and needs[2]:
            grads[2] = k.empty((o,))
        gt = k.empty((o,) + (n,) + g.shape[2:])  # the output gradient as (O, N, OH, OW), one GEMM per group
        self.from_nchw(k, g, gt, grads[-1] if len(inputs) == 3 else None)
        gt = gt.reshape(groups, o // groups, pixels)
        cols = cols.reshape(groups, depth, pixels)
        if needs[1]:
            grads[1] = k.empty(weights.shape)
            self.products(k, gt, cols.transpose(0, 2, 1), grads[1].reshape(groups, o // groups, depth))
        if needs[0]:
            dcols = k.empty(cols.shape)
            self.products(k, weights.reshape(groups, o // groups, depth).transpose(0, 2, 1), gt, dcols)
            grads[0] = self.col2im(k, dcols, x.shape, weights.shape[2:], stride, padding, dilation, g.shape[2:])
        return tuple(grads)

    def products(self, k, a, b, out):
        """out[g] = a[g]·b[g] for each group g: the convolution's GEMMs, a method so that a handler's kernel can
        take them from its own BLAS."""
        k.xp.matmul(a, b, out=out)

    def to_nchw(self, k, y, biases, out):
        """out (N, O, OH, OW) = y (O, N, OH, OW) transposed, plus the biases (a tuple of none or one)."""
        if biases:
            k.xp.add(y.transpose(1, 0, 2, 3), biases[0].reshape(-1, 1, 1), out=out)
        else:
            out[...] = y.transpose(1, 0, 2, 3)

    def from_nchw(self, k, g, out, sums):
        """out (O, N, OH, OW) = g (N, O, OH, OW) transposed; ``sums`` (O,), unless None, = g summed per channel
        (the biases' gradient, taken while the transpose reads g)."""
        out[...] = g.transpose(1, 0, 2, 3)
        if sums is not None:
            k.xp.sum(g, axis=(0, 2, 3), out=sums)

    def im2col(self, k, x, kernel, stride, padding, dilation, out_hw):
        """The columns (C, KH, KW, N, OH, OW): cols[c, i, j, n] = the (OH, OW) pixels tap (i, j) reads of x[n, c]."""
        padded = pad(k, x, padding, 0.0)
        cols = k.empty((x.shape[1], *kernel, x.shape[0], *out_hw))
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                cols[:, i, j] = window(padded, i, j, stride, dilation, out_hw).transpose(1, 0, 2, 3)
        return cols

    def col2im(self, k, dcols, shape, kernel, stride, padding, dilation, out_hw):
        """The gradient of x (N, C, H, W) from that of the columns: every tap's part added where it read."""
        dcols = dcols.reshape(shape[1], *kernel, shape[0], *out_hw)
        dx = k.full(padded_shape(shape, padding), 0.0)
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                view = window(dx, i, j, stride, dilation, out_hw)
                k.xp.add(view, dcols[:, i, j].transpose(1, 0, 2, 3), out=view)
        return crop(k, dx, shape, padding)

    def examples(self):
        def make(x, w, bias):
            return lambda rng: [rng.standard_normal(x), rng.standard_normal(w)] + (
                [rng.standard_normal(w[0])] if bias else [])

        return [
            ("plain", make((2, 2, 4, 4), (3, 2, 3, 3), True), {}),
            ("stride-pad", make((1, 2, 5, 4), (2, 2, 2, 3), True), {"stride": (2, 1), "padding": (1, 0, 2, 1)}),
            ("dilation-groups", make((2, 4, 5, 5), (4, 2, 2, 2), False),
             {"dilation": (2, 1), "groups": 2, "padding": (1, 1, 0, 0)}),
        ]


class _Pool(Op):
    """What max and average pooling share: one input x (N, C, H, W), ``kernel``, ``stride``, ``padding``."""

    name = ""

    def check(self, inputs, params):
        x = _shape(inputs[0]) if len(inputs) == 1 else ()
        if len(x) != 4:
            raise ShapeError(f"{self.name}: takes one input x (N, C, H, W), got shapes {[_shape(a) for a in inputs]}")
        kernel, padding = params["kernel"], params.get("padding", (0, 0, 0, 0))
        if max(padding[:2]) > kernel[0] // 2 or max(padding[2:]) > kernel[1] // 2:
            raise ShapeError(f"{self.name}: padding {padding} is more than half the kernel {kernel}")
        if min(_out_hw(x, kernel, params.get("stride", kernel), (1, 1), padding)) < 1:
            raise ShapeError(f"{self.name}: kernel {kernel} does not fit input {x} with padding {padding}")

    @staticmethod
    def geometry(x_shape, kernel, stride, padding):
        stride = kernel if stride is None else stride
        return stride, _out_hw(x_shape, kernel, stride, (1, 1), padding)

    def examples(self):
        def make(shape):
            return lambda rng: [rng.standard_normal(shape)]

        return [("2x2", make((2, 2, 4, 4)), {"kernel": (2, 2)}),
                ("3x2-stride-pad", make((1, 2, 5, 6)), {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 1, 0, 1)})]


class MaxPool2D(_Pool):
    """The largest value of each window (padding never wins); saved: the tap that won, for the backward pass."""

    name = "max_pool2d"

    def forward(self, k, x, kernel, stride=None, padding=(0, 0, 0, 0)):
        stride, out_hw = self.geometry(x.shape, kernel, stride, padding)
        xp, padded = k.xp, pad(k, x, padding, -math.inf)
        out, taps = k.empty(x.shape[:2] + out_hw), k.empty(x.shape[:2] + out_hw, "int32")
        out[...], taps[...] = window(padded, 0, 0, stride, (1, 1), out_hw), 0
        for tap in range(1, kernel[0] * kernel[1]):
            view = window(padded, *divmod(tap, kernel[1]), stride, (1, 1), out_hw)
            larger = view > out  # the first of equal values wins, as in PyTorch
            xp.copyto(out, view, where=larger)
            xp.copyto(taps, tap, where=larger)
        return out, taps

    def backward(self, k, g, inputs, out, taps, needs, kernel, stride=None, padding=(0, 0, 0, 0)):
        x = inputs[0]
        stride, out_hw = self.geometry(x.shape, kernel, stride, padding)
        dx = k.full(padded_shape(x.shape, padding), 0.0)
        for tap in range(kernel[0] * kernel[1]):
            view = window(dx, *divmod(tap, kernel[1]), stride, (1, 1), out_hw)
            k.xp.add(view, k.xp.where(taps == tap, g, 0), out=view)
        return (crop(k, dx, x.shape, padding),)


class AvgPool2D(_Pool):
    """The mean of each window, padding counted as zeros (PyTorch's count_include_pad=True)."""

    name = "avg_pool2d"

    def forward(self, k, x, kernel, stride=None, padding=(0, 0, 0, 0)):
        stride, out_hw = self.geometry(x.shape, kernel, stride, padding)
        xp, padded = k.xp, pad(k, x, padding, 0.0)
        out = k.full(x.shape[:2] + out_hw, 0.0)
        for tap in range(kernel[0] * kernel[1]):
            xp.add(out, window(padded, *divmod(tap, kernel[1]), stride, (1, 1), out_hw), out=out)
        xp.multiply(out, 1.0 / (kernel[0] * kernel[1]), out=out)
        return out, None

    def backward(self, k, g, inputs, out, saved, needs, kernel, stride=None, padding=(0, 0, 0, 0)):
        x = inputs[0]
        stride, out_hw = self.geometry(x.shape, kernel, stride, padding)
        share = k.empty(g.shape)
        k.xp.multiply(g, 1.0 / (kernel[0] * kernel[1]), out=share)
        dx = k.full(padded_shape(x.shape, padding), 0.0)
        for tap in range(kernel[0] * kernel[1]):
            view = window(dx, *divmod(tap, kernel[1]), stride, (1, 1), out_hw)
            k.xp.add(view, share, out=view)
        return (crop(k, dx, x.shape, padding),)


class BatchNorm(Op):
    """Batch normalisation over every axis but the channels (axis 1): inputs x, gamma, beta, running_mean,
    running_var (all per channel but x).

    ``training=True``: normalised with the batch's mean and (biased) variance, and the running statistics —
    the layer's state, not parameters — move towards them in place: mean ← (1 − momentum)·mean + momentum·μ,
    var ← (1 − momentum)·var + momentum·σ²·M/(M − 1) (unbiased, as PyTorch). Being part of this op's one
    kernel call, the update is repeated by a recorded step (sigmann-replay). ``training=False``: normalised
    with the running statistics, which are then read only. They get gradients only in evaluation, where the
    output depends on them (the conformance kit checks it); layers never ask.

    ``activation="relu"`` rectifies the output in the same pass (conv → batch norm → ReLU, the usual block):
    a separate ReLU would write a second copy of the whole activation forwards and read two backwards.
    """

    ACTIVATIONS = ("none", "relu")

    def check(self, inputs, params):
        shapes = [_shape(a) for a in inputs]
        if len(shapes) != 5 or len(shapes[0]) < 2 or any(s != (shapes[0][1],) for s in shapes[1:]):
            raise ShapeError(f"batch_norm: takes x (N, C, ...) and gamma, beta, running_mean, running_var (C,); "
                             f"got shapes {shapes}")
        if params.get("training") and math.prod(shapes[0]) // shapes[0][1] < 2:
            raise ShapeError(f"batch_norm: training needs more than one value per channel, got x {shapes[0]}")
        if params.get("activation", "none") not in self.ACTIVATIONS:
            raise ShapeError(f"batch_norm: activation {params['activation']!r} is not one of "
                             f"{', '.join(self.ACTIVATIONS)}")

    @staticmethod
    def layout(x):
        """The reduction axes and the per-channel broadcast shape of x."""
        return (0, *range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)

    def forward(self, k, x, gamma, beta, running_mean, running_var, training=False, momentum=0.1, eps=1e-5,
                activation="none"):
        """Saved: (x̂, 1/√(σ² + eps)); updates the running statistics in place when training."""
        out, xhat, inv = k.empty(x.shape), k.empty(x.shape), k.empty(gamma.shape)  # all rewritten by a replay
        self.normalise(k, x, gamma, beta, running_mean, running_var, out, xhat, inv, training, momentum, eps,
                       activation == "relu")
        return out, (xhat, inv)

    def normalise(self, k, x, gamma, beta, running_mean, running_var, out, xhat, inv, training, momentum, eps, relu):
        """Write ``out`` (rectified if ``relu``), ``xhat`` and ``inv``; in training, move the running statistics
        (the ``cpu`` kernel's one pass per channel)."""
        xp, (axes, shape) = k.xp, self.layout(x)
        if training:
            mean = xp.mean(x, axis=axes)
            xp.subtract(x, mean.reshape(shape), out=xhat)
            xp.multiply(xhat, xhat, out=out)
            var = xp.mean(out, axis=axes)
            count = x.size // x.shape[1]
            xp.multiply(running_mean, 1 - momentum, out=running_mean)
            xp.add(running_mean, momentum * mean, out=running_mean)
            xp.multiply(running_var, 1 - momentum, out=running_var)
            xp.add(running_var, (momentum * count / (count - 1)) * var, out=running_var)
        else:
            mean, var = running_mean, running_var
            xp.subtract(x, mean.reshape(shape), out=xhat)
        xp.add(var, eps, out=inv)
        xp.sqrt(inv, out=inv)
        xp.divide(1.0, inv, out=inv)
        xp.multiply(xhat, inv.reshape(shape), out=xhat)
        xp.multiply(xhat, gamma.reshape(shape), out=out)
        xp.add(out, beta.reshape(shape), out=out)
        if relu:
            xp.maximum(out, 0, out=out)

    def backward(self, k, g, inputs, out, saved, needs, training=False, momentum=0.1, eps=1e-5, activation="none"):
        xp, (xhat, inv), gamma = k.xp, saved, inputs[1]
        dx, dgamma, dbeta = k.empty(g.shape), k.empty(inv.shape), k.empty(inv.shape)
        self.gradients(k, g, xhat, inv, gamma, dx, dgamma, dbeta, training, out if activation == "relu" else None)
        dmean = dvar = None
        if not training and (needs[3] or needs[4]):  # the running statistics, which evaluation reads
            dmean, dvar = k.empty(inv.shape), k.empty(inv.shape)
            xp.multiply(dbeta, -gamma * inv, out=dmean)
            xp.multiply(dgamma, -0.5 * gamma * inv * inv, out=dvar)
        return (dx if needs[0] else None, dgamma if needs[1] else None, dbeta if needs[2] else None,
                dmean if needs[3] else None, dvar if needs[4] else None)

    def gradients(self, k, g, xhat, inv, gamma, dx, dgamma, dbeta, training, rectified):
        """Write ``dx``, ``dgamma`` = Σ g·x̂ and ``dbeta`` = Σ g (the ``cpu`` kernel's one pass per channel), g
        first zeroed where the ``rectified`` output (None: no relu) is not positive."""
        xp, (axes, shape) = k.xp, self.layout(g)
        if rectified is not None:
            g = xp.where(rectified > 0, g, 0)
        xp.sum(g, axis=axes, out=dbeta)
        xp.multiply(g, xhat, out=dx)
        xp.sum(dx, axis=axes, out=dgamma)
        if training:  # dx = γ/(σ·M) · (M·g − Σg − x̂·Σ(g·x̂))
            count = g.size // g.shape[1]
            xp.multiply(xhat, (dgamma / count).reshape(shape), out=dx)
            xp.subtract(g, dx, out=dx)
            xp.subtract(dx, (dbeta / count).reshape(shape), out=dx)
            xp.multiply(dx, (gamma * inv).reshape(shape), out=dx)
        else:
            xp.multiply(g, (gamma * inv).reshape(shape), out=dx)

    def examples(self):
        def make(shape):
            c = shape[1]
            return lambda rng: [rng.standard_normal(shape) * 2 + 1, rng.standard_normal(c), rng.standard_normal(c),
                                rng.standard_normal(c), rng.uniform(0.5, 2.0, c)]

        return [("train-4d", make((3, 2, 2, 3)), {"training": True}),
                ("train-2d", make((4, 3)), {"training": True, "momentum": 0.3, "eps": 1e-3}),
                ("eval-4d", make((2, 3, 2, 2)), {"training": False}),
                ("train-4d-relu", make((3, 2, 2, 3)), {"training": True, "activation": "relu"}),
                ("eval-4d-relu", make((2, 3, 2, 2)), {"training": False, "activation": "relu"})]


class LayerNorm(Op):
    """Each row of x (M, F) normalised by its own mean and variance, then scaled and shifted per feature:
    inputs x, gamma (F,), beta (F,); the same in training and evaluation."""

    def check(self, inputs, params):
        shapes = [_shape(a) for a in inputs]
        if len(shapes) != 3 or len(shapes[0]) != 2 or shapes[1] != shapes[0][1:] or shapes[2] != shapes[0][1:]:
            raise ShapeError(f"layer_norm: takes x (M, F), gamma (F,), beta (F,); got shapes {shapes}")

    def forward(self, k, x, gamma, beta, eps=1e-5):
        """Saved: (x̂, 1/√(σ² + eps) per row)."""
        xp = k.xp
        xhat = k.empty(x.shape)
        xp.subtract(x, xp.mean(x, axis=1, keepdims=True), out=xhat)
        out, inv = k.empty(x.shape), k.empty((x.shape[0], 1))
        xp.multiply(xhat, xhat, out=out)
        xp.mean(out, axis=1, keepdims=True, out=inv)
        xp.add(inv, eps, out=inv)
        xp.sqrt(inv, out=inv)
        xp.divide(1.0, inv, out=inv)
        xp.multiply(xhat, inv, out=xhat)
        xp.multiply(xhat, gamma, out=out)
        xp.add(out, beta, out=out)
        return out, (xhat, inv)

    def backward(self, k, g, inputs, out, saved, needs, eps=1e-5):
        xp, (xhat, inv), gamma = k.xp, saved, inputs[1]
        features = g.shape[1]
        gh = k.empty(g.shape)
        xp.multiply(g, xhat, out=gh)
        dgamma = xp.sum(gh, axis=0, out=k.empty(gamma.shape)) if needs[1] else None
        dbeta = xp.sum(g, axis=0, out=k.empty(gamma.shape)) if needs[2] else None
        dx = None
        if needs[0]:  # dx = (1/σ)·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = g·γ
            xp.multiply(g, gamma, out=gh)
            dx = k.empty(g.shape)
            xp.multiply(gh, xhat, out=dx)
            projection = xp.sum(dx, axis=1, keepdims=True) / features
            xp.multiply(xhat, projection, out=dx)
            xp.subtract(gh, dx, out=dx)
            xp.subtract(dx, xp.sum(gh, axis=1, keepdims=True) / features, out=dx)
            xp.multiply(dx, inv, out=dx)
        return dx, dgamma, dbeta

    def examples(self):
        return [("rows", lambda rng: [rng.standard_normal((3, 5)) * 2 + 1, rng.standard_normal(5),
                                      rng.standard_normal(5)], {"eps": 1e-3})]

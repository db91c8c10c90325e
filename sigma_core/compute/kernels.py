"""Array kernels: the raw-array operations a handler is built from.

:class:`ArrayKernels` is written once over an array module ``xp`` (NumPy here, CuPy for ``cuda``), like Thinc's
``Ops``: raw arrays or Python scalars in, raw arrays from the handler's :class:`~sigma_core.compute.buffers.BufferPool`
out, so a training step reuses its buffers. A backend overrides its hot kernels by name; the VJPs
(each op's ``backward``, :mod:`sigma_core.compute.ops`) use only kernels, so every backend gets gradients for free.
"""

import math

import numpy

from sigma_core.compute.buffers import BufferPool
from sigma_core.compute.updates import Updates
from sigma_core.errors import ShapeError

ACTIVATIONS = ("none", "relu", "sigmoid", "tanh", "softplus")


def shape_of(x) -> tuple:
    """Shape of a raw array, or () for a Python scalar."""
    return getattr(x, "shape", ())


def broadcast_shape(op: str, a: tuple, b: tuple) -> tuple:
    """NumPy broadcasting of two shapes; the error names the op and both shapes."""
    if a == b:
        return a
    try:
        return numpy.broadcast_shapes(a, b)
    except ValueError:
        raise ShapeError(f"{op}: shapes {a} and {b} cannot be broadcast together") from None


def normalise_axes(axis, ndim: int) -> tuple:
    """``axis`` as a sorted tuple of non-negative ints (None means all axes)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim if ndim else 0 for a in axes))


def _ufunc(name: str, arity=1):
    """A kernel applying the array module's ufunc ``name`` into a pooled buffer (two operands broadcast)."""
    if arity == 1:
        def kernel(self, x):
            out = self.empty(x.shape)
            getattr(self.xp, name)(x, out=out)
            return out
    else:
        def kernel(self, x, y):
            out = self.empty(broadcast_shape(name, shape_of(x), shape_of(y)))
            getattr(self.xp, name)(x, y, out=out)
            return out
    kernel.__name__ = name
    return kernel


class ArrayKernels:
    """Every kernel a handler needs, written once over ``self.xp``; optimiser update rules in :attr:`updates`."""

    xp = numpy
    updates_class = Updates
    normalise_axes = staticmethod(normalise_axes)  # for the VJPs

    def __init__(self, dtype, seed=None):
        self.dtype = numpy.dtype(dtype)
        #: Where every kernel takes its output buffers (``pool.empty(shape, dtype)``). A compiled training step
        #: replaying recorded calls puts a stand-in here that hands back the recorded buffers, in order.
        self.pool = BufferPool(self.xp)
        self.rng = numpy.random.Generator(numpy.random.PCG64(seed))
        self.updates = self.updates_class(self)

    def run_op(self, rule, /, *args, **kwargs):
        """``rule(self, *args, **kwargs)``: a plugin op's forward or backward rule (:class:`sigma_core.Op`), called
        through here so that what watches the kernels' calls (a recorded step) sees the op as one call."""
        return rule(self, *args, **kwargs)

    # -- creation -------------------------------------------------------------------
    def empty(self, shape, dtype=None):
        return self.pool.empty(tuple(shape), self.dtype if dtype is None else dtype)

    def full(self, shape, value, dtype=None):
        out = self.empty(shape, dtype)
        out.fill(value)
        return out

    def asarray(self, host_array):
        """Copy host (NumPy) data in; floats become the handler's dtype."""
        host = numpy.asarray(host_array)
        dtype = self.dtype if host.dtype.kind in "fc" or host.dtype == object else host.dtype
        out = self.empty(host.shape, dtype)
        out[...] = host
        return out

    def adopt(self, host_array):
        """A host array the caller hands over (a batch), used as it is when it fits: kernels never write
        into their inputs, so that saves a copy per batch. Device handlers copy."""
        if (type(host_array) is numpy.ndarray and self.xp is numpy and host_array.flags.c_contiguous
                and (host_array.dtype == self.dtype or host_array.dtype.kind in "iub")):
            return host_array
        return self.asarray(host_array)

    def to_host(self, x):
        """A NumPy copy of ``x``."""
        return numpy.array(x, copy=True)

    def copy(self, x):
        out = self.empty(x.shape, x.dtype)
        out[...] = x
        return out

    # -- elementwise, with broadcasting ----------------------------------------------------
    add = _ufunc("add", 2)
    subtract = _ufunc("subtract", 2)
    multiply = _ufunc("multiply", 2)
    divide = _ufunc("divide", 2)
    power = _ufunc("power", 2)
    maximum = _ufunc("maximum", 2)
    negative = _ufunc("negative")
    exp = _ufunc("exp")
    log = _ufunc("log")
    sqrt = _ufunc("sqrt")
    abs = _ufunc("abs")
    sign = _ufunc("sign")
    tanh = _ufunc("tanh")

    def compare(self, op, x, y):
        """Boolean mask of ``x <op> y`` for op in greater, less, equal, ..."""
        shape = broadcast_shape(op, shape_of(x), shape_of(y))
        out = self.empty(shape, bool)
        getattr(self.xp, op)(x, y, out=out)
        return out

    def where(self, condition, x, y):
        shape = broadcast_shape("where", shape_of(condition), shape_of(x))
        shape = broadcast_shape("where", shape, shape_of(y))
        out = self.empty(shape)
        out[...] = self.xp.where(condition, x, y)
        return out

    # -- matrix product --------------------------------------------------------------------
    def matmul(self, x, y):
        sx, sy = x.shape, y.shape
        if len(sx) == 2 and len(sy) == 2 and sx[1] == sy[0]:  # the hot case, checked cheaply
            out = self.empty((sx[0], sy[1]))
            self.xp.matmul(x, y, out=out)
            return out
        if x.ndim == 0 or y.ndim == 0:
            raise ShapeError(f"matmul: shapes {sx} and {sy}: operands must have at least one dimension")
        inner_x = sx[-1]
        inner_y = sy[-2] if y.ndim > 1 else sy[0]
        if inner_x != inner_y:
            raise ShapeError(f"matmul: shapes {sx} and {sy} do not align ({inner_x} != {inner_y})")
        batch = broadcast_shape("matmul", sx[:-2], sy[:-2])
        shape = batch + sx[-2:-1] + sy[-1:] if y.ndim > 1 else batch + sx[-2:-1]
        out = self.empty(shape)
        self.xp.matmul(x, y, out=out)
        return out

    # -- activations ------------------------------------------------------------------------
    def activate(self, name, x, out):
        """``out`` = the built-in activation ``name`` of ``x``; ``out`` may be ``x`` (in place)."""
        xp = self.xp
        if name == "relu":
            xp.maximum(x, 0, out=out)
        elif name == "tanh":
            xp.tanh(x, out=out)
        elif name == "sigmoid":  # as tanh(x/2)/2 + 1/2: 1 / (1 + exp(-x)) overflows exp for very negative x
            xp.multiply(x, 0.5, out=out)
            xp.tanh(out, out=out)
            xp.multiply(out, 0.5, out=out)
            xp.add(out, 0.5, out=out)
        elif name == "softplus":
            xp.logaddexp(x, 0, out=out)
        elif out is not x:  # none
            out[...] = x
        return out

    def relu(self, x):
        return self.activate("relu", x, self.empty(x.shape))

    def sigmoid(self, x):
        return self.activate("sigmoid", x, self.empty(x.shape))

    def softplus(self, x):
        return self.activate("softplus", x, self.empty(x.shape))

    def clip(self, x, low, high):
        out = self.empty(x.shape)
        self.xp.clip(x, low, high, out=out)
        return out

    def activation_backward(self, name, g, y):
        """g·f'(x) of a built-in activation from its *output* ``y``: every built-in derivative is a
        function of the output, so a fused forward pass need not keep the pre-activation."""
        xp = self.xp
        if name == "none":
            return g
        out = self.empty(y.shape)
        if name == "relu":
            xp.greater(y, 0, out=out)
        elif name == "sigmoid":  # y (1 - y)
            xp.subtract(1, y, out=out)
            xp.multiply(out, y, out=out)
        elif name == "tanh":  # 1 - y^2
            xp.multiply(y, y, out=out)
            xp.subtract(1, out, out=out)
        elif name == "softplus":  # sigmoid(x) = 1 - exp(-y)
            xp.negative(y, out=out)
            xp.exp(out, out=out)
            xp.subtract(1, out, out=out)
        else:
            raise ValueError(f"unknown built-in activation {name!r}")
        xp.multiply(out, g, out=out)
        return out

    def activation_backward_sum(self, name, g, y, sums):
        """(:meth:`activation_backward`, its column sums or None): a dense layer's two, one pass on ``cpu``."""
        gz = self.activation_backward(name, g, y)
        return gz, self.sum(gz, axis=0) if sums else None

    # -- reductions ----------------------------------------------------------------------
    def _reduce_shape(self, x, axis, keepdims):
        # Check before normalise_axes, whose modulo would wrap a bad axis onto a real one.
        for a in () if axis is None else (axis,) if isinstance(axis, int) else axis:
            if not -x.ndim <= a < x.ndim:
                raise ShapeError(f"reduce: axis {axis} out of range for shape {x.shape}")
        axes = normalise_axes(axis, x.ndim)
        if keepdims:
            return tuple(1 if i in axes else n for i, n in enumerate(x.shape)), axes
        return tuple(n for i, n in enumerate(x.shape) if i not in axes), axes

    def _reduce(self, ufunc, x, axis, keepdims):
        shape, axes = self._reduce_shape(x, axis, keepdims)
        out = self.empty(shape, x.dtype)
        ufunc(x, axis=axes, keepdims=keepdims, out=out)
        return out

    def sum(self, x, axis=None, keepdims=False):
        if type(axis) is int and not keepdims and -x.ndim <= axis < x.ndim:  # e.g. bias gradients
            axis %= x.ndim
            out = self.empty(x.shape[:axis] + x.shape[axis + 1 :], x.dtype)
            self.xp.add.reduce(x, axis, out=out)
            return out
        return self._reduce(self.xp.sum, x, axis, keepdims)

    def mean(self, x, axis=None, keepdims=False):
        return self._reduce(self.xp.mean, x, axis, keepdims)

    def max(self, x, axis=None, keepdims=False):
        return self._reduce(self.xp.max, x, axis, keepdims)

    def min(self, x, axis=None, keepdims=False):
        return self._reduce(self.xp.min, x, axis, keepdims)

    def argmax(self, x, axis=None):
        shape = () if axis is None else self._reduce_shape(x, axis, False)[0]
        out = self.empty(shape, numpy.int64)
        self.xp.argmax(x, axis=axis, out=out)
        return out

    def sum_to_shape(self, g, shape):
        """Undo broadcasting: sum ``g`` down to ``shape`` (the VJP of a broadcast)."""
        shape = tuple(shape)
        if g.shape == shape:
            return g
        lead = g.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
        out = self.sum(g, axis=axes, keepdims=True) if axes else g
        return out.reshape(shape)

    def broadcast_to(self, x, shape):
        """A materialised (writable, contiguous) broadcast of ``x`` to ``shape``."""
        out = self.empty(shape, getattr(x, "dtype", self.dtype))
        out[...] = x
        return out

    # -- softmax family ----------------------------------------------------------------
    def log_softmax(self, x, axis=-1):
        xp = self.xp
        shift = self.max(x, axis=axis, keepdims=True)
        out = self.subtract(x, shift)
        tmp = self.exp(out)
        lse = self.sum(tmp, axis=axis, keepdims=True)
        xp.log(lse, out=lse)
        xp.subtract(out, lse, out=out)
        return out

    def softmax(self, x, axis=-1):
        out = self.log_softmax(x, axis)
        self.xp.exp(out, out=out)
        return out

    def softmax_cross_entropy(self, logits, targets):
        """``(cost, probabilities)``: see :meth:`Handler.softmax_cross_entropy`; the backward pass needs the
        probabilities. One pass of exp: with s = logits - rowmax and Z = Σ exp(s), log p = s - log Z."""
        xp = self.xp
        rows = logits.shape[0]
        shifted = self.empty(logits.shape)
        row_max = self.empty((rows, 1))
        xp.maximum.reduce(logits, 1, out=row_max[:, 0])
        xp.subtract(logits, row_max, out=shifted)
        probabilities = self.empty(logits.shape)
        xp.exp(shifted, out=probabilities)
        log_z = row_max  # reuse: the row max is no longer needed
        xp.add.reduce(probabilities, 1, out=log_z[:, 0])
        xp.divide(probabilities, log_z, out=probabilities)
        xp.log(log_z, out=log_z)
        if targets.dtype.kind in "iu":
            picked = shifted[xp.arange(rows), targets]
            cost = (float(log_z.sum()) - float(picked.sum())) / rows
        else:  # Σ t (log Z - s); a target row need not sum to 1, so log Z is weighted by its mass
            xp.multiply(targets, shifted, out=shifted)
            mass = xp.add.reduce(targets, 1)
            cost = (float(mass @ log_z[:, 0]) - float(shifted.sum())) / rows
        return xp.asarray(cost, dtype=self.dtype), probabilities

    def label_range(self, labels) -> tuple[int, int]:
        """(lowest, highest) of integer class labels, checked before they index anything."""
        return int(labels.min()), int(labels.max())

    def softmax_cross_entropy_backward(self, g, probabilities, targets):
        """(mass·softmax − targets)·g/rows for the incoming 0-d gradient ``g``. A target row's mass (its sum,
        1 for a label) weights log Z in the cost, so a masked (all-zero) row gets no gradient."""
        xp = self.xp
        rows = probabilities.shape[0]
        if targets.dtype.kind in "iu":
            out = self.copy(probabilities)
            out[xp.arange(rows), targets] -= 1
        else:
            out = self.empty(probabilities.shape)
            xp.multiply(probabilities, self.sum(targets, axis=1, keepdims=True), out=out)
            xp.subtract(out, targets, out=out)
        xp.multiply(out, g * (1.0 / rows), out=out)
        return out

    # -- fused dense layer -------------------------------------------------------------
    def dense(self, x, weights, bias, activation):
        """activation(x @ weights + bias) in one pass over the output buffer."""
        out = self.matmul(x, weights)
        if bias is not None:
            if bias.shape != out.shape[-1:]:
                raise ShapeError(f"dense: bias shape {bias.shape} does not match output shape {out.shape}")
            self.xp.add(out, bias, out=out)
        return self.activate(activation, out, out)

    # -- shape and indexing (views where the array module allows) ---------------------------
    def reshape(self, x, shape):
        try:
            return x.reshape(shape)
        except ValueError:
            raise ShapeError(f"reshape: cannot reshape shape {x.shape} into shape {tuple(shape)}") from None

    def transpose(self, x, axes=None):
        if axes is not None and sorted(a % x.ndim for a in axes) != list(range(x.ndim)):
            raise ShapeError(f"transpose: axes {tuple(axes)} are not a permutation for shape {x.shape}")
        return x.transpose(axes)

    def getitem(self, x, index):
        try:
            return x[index]
        except IndexError as error:
            raise ShapeError(f"getitem: index {index!r} does not fit shape {x.shape}: {error}") from None

    def scatter_add(self, shape, index, g):
        """Zeros of ``shape`` with ``g`` added at ``index`` (VJP of indexing)."""
        out = self.full(shape, 0)
        self.xp.add.at(out, index, g)
        return out

    def concatenate(self, xs, axis=0):
        first = xs[0].shape
        ndim = len(first)
        axis = axis % ndim
        for x in xs[1:]:
            if x.ndim != ndim or any(a != b for i, (a, b) in enumerate(zip(first, x.shape)) if i != axis):
                raise ShapeError(f"concatenate: shapes {first} and {x.shape} differ outside axis {axis}")
        shape = first[:axis] + (sum(x.shape[axis] for x in xs),) + first[axis + 1 :]
        out = self.empty(shape)
        self.xp.concatenate(xs, axis=axis, out=out)
        return out

    def stack(self, xs, axis=0):
        first = xs[0].shape
        for x in xs[1:]:
            if x.shape != first:
                raise ShapeError(f"stack: shapes {first} and {x.shape} differ")
        axis = axis % (len(first) + 1)
        out = self.empty(first[:axis] + (len(xs),) + first[axis:])
        self.xp.stack(xs, axis=axis, out=out)
        return out

    # -- random, from one seedable generator ----------------------------------------------------
    def uniform(self, shape, low=0.0, high=1.0):
        out = self.empty(shape)
        self.rng.random(out=out, dtype=self.dtype)
        if low != 0.0 or high != 1.0:
            self.xp.multiply(out, high - low, out=out)
            self.xp.add(out, low, out=out)
        return out

    def normal(self, shape, mean=0.0, std=1.0):
        out = self.empty(shape)
        self.rng.standard_normal(out=out, dtype=self.dtype)
        if std != 1.0 or mean != 0.0:
            self.xp.multiply(out, std, out=out)
            self.xp.add(out, mean, out=out)
        return out

    def bernoulli(self, shape, p):
        """A 0/1 mask in the handler's dtype with P(1) = p."""
        out = self.uniform(shape)
        self.xp.less(out, p, out=out)
        return out

    def dropout(self, x, p):
        """Inverted dropout: ``(y, mask)``, the mask holding 0 (probability p) or 1/(1-p)."""
        mask = self.bernoulli(x.shape, 1.0 - p)
        self.xp.multiply(mask, 1.0 / (1.0 - p), out=mask)
        return self.multiply(x, mask), mask

    def rng_state(self) -> dict:
        return self.rng.bit_generator.state

    def set_rng_state(self, state: dict):
        self.rng.bit_generator.state = state

    # -- in place (the only way live data changes) ------------------------------------------------
    def fill_(self, x, value):
        x[...] = value

    def copy_(self, dst, src):
        if dst.shape != src.shape:
            raise ShapeError(f"copy: destination shape {dst.shape} and source shape {src.shape} differ")
        dst[...] = src

    def add_(self, dst, src, scale=1.0):
        """dst += scale * src."""
        if scale == 1.0:
            self.xp.add(dst, src, out=dst)
        else:
            self.xp.add(dst, self.multiply(src, scale), out=dst)

    def all_finite(self, x) -> bool:
        if not x.ndim:  # a cost, every step: ~2 µs faster than the reduction
            return math.isfinite(x)
        return bool(self.xp.isfinite(x).all())


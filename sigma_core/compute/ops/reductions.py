"""The core's reductions over ``axis`` (an int, a tuple, or None: every axis), ``keepdims`` or not, as ops."""

import math

from sigma_core.compute.ops.base import KernelOp

normal, grid = KernelOp.normal, KernelOp.grid


def _expand_reduced(k, g, x, axis, keepdims):
    """Reshape a reduction's gradient so it broadcasts against the input."""
    if keepdims or x.ndim == 0:
        return g
    axes = k.normalise_axes(axis, x.ndim)
    return k.reshape(g, tuple(1 if i in axes else n for i, n in enumerate(x.shape)))


class Reduction(KernelOp):
    """``kernel(x, axis, keepdims)``; its examples cover every form of ``axis``, with and without ``keepdims``."""

    kernel, axes, make = "", (None, 0, -1, (0, 2)), staticmethod(normal)

    def forward(self, k, x, *, axis=None, keepdims=False):
        return getattr(k, self.kernel)(x, axis=axis, keepdims=keepdims), None

    def examples(self):
        return [self.example(f"axis{axis}-keepdims{keep}", self.make(2, 3, 4), axis=axis, keepdims=keep)
                for axis in self.axes for keep in (False, True)]


class Sum(Reduction):
    """The sum over ``axis``."""

    kernel = "sum"

    def backward(self, k, g, inputs, out, saved, needs, *, axis=None, keepdims=False):
        x = inputs[0]
        return (k.broadcast_to(_expand_reduced(k, g, x, axis, keepdims), x.shape),)


class Mean(Reduction):
    """The mean over ``axis``."""

    kernel = "mean"

    def backward(self, k, g, inputs, out, saved, needs, *, axis=None, keepdims=False):
        x = inputs[0]
        count = math.prod(x.shape[a] for a in k.normalise_axes(axis, x.ndim))
        return (k.broadcast_to(k.multiply(_expand_reduced(k, g, x, axis, keepdims), 1.0 / count), x.shape),)


class Max(Reduction):
    """The largest element over ``axis`` (the gradient goes to the largest, shared between ties)."""

    kernel, axes, make = "max", (None, 1, (0, 2)), staticmethod(grid)

    def backward(self, k, g, inputs, out, saved, needs, *, axis=None, keepdims=False):
        x = inputs[0]
        hit = k.compare("equal", x, _expand_reduced(k, out, x, axis, keepdims))
        ties = k.sum(k.multiply(hit, 1.0), axis=k.normalise_axes(axis, x.ndim), keepdims=True)
        share = k.divide(_expand_reduced(k, g, x, axis, keepdims), ties)
        return (k.where(hit, share, 0.0),)


class Min(Max):
    """The smallest element over ``axis`` (the gradient goes to the smallest, shared between ties)."""

    kernel = "min"

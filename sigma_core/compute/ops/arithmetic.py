"""The core's arithmetic ops: elementwise ``+ - * / **`` and ``maximum`` with NumPy broadcasting, and ``matmul``.

Each is an :class:`~sigma_core.compute.ops.Op` like a plugin's: its forward is one kernel of ``k``, its ``backward`` the
vector-Jacobian product, written with kernels only, its ``examples`` the conformance kit's cases. An operand may
be a Python number; a gradient that reached a broadcast operand is summed back to its shape.
"""

import math

from sigma_core.compute.ops.base import KernelOp, cases

normal, positive, away, grid = KernelOp.normal, KernelOp.positive, KernelOp.away, KernelOp.grid


def unbroadcast(k, grad, x):
    """Sum a broadcast gradient back to the shape of operand ``x`` (``()`` for a number)."""
    return k.sum_to_shape(grad, getattr(x, "shape", ()))


def _broadcast_cases(make_x=normal, make_y=normal):
    """The operand shapes with their own code paths in :func:`unbroadcast`."""
    return cases(same=(make_x(3, 4), make_y(3, 4)), row=(make_x(3, 4), make_y(4)),
                    outer=(make_x(3, 1), make_y(1, 4)), scalar_array=(make_x(2, 3), make_y()))


class Add(KernelOp):
    """``a + b``."""

    def forward(self, k, a, b):
        return k.add(a, b), None

    def backward(self, k, g, inputs, out, saved, needs):
        x, y = inputs
        return unbroadcast(k, g, x) if needs[0] else None, unbroadcast(k, g, y) if needs[1] else None

    def examples(self):
        return _broadcast_cases()


class Subtract(KernelOp):
    """``a - b``."""

    def forward(self, k, a, b):
        return k.subtract(a, b), None

    def backward(self, k, g, inputs, out, saved, needs):
        x, y = inputs
        return unbroadcast(k, g, x) if needs[0] else None, unbroadcast(k, k.negative(g), y) if needs[1] else None

    def examples(self):
        return _broadcast_cases() + cases(scalar_array_left=(normal(), normal(2, 3)))


class Multiply(KernelOp):
    """``a * b``, elementwise."""

    def forward(self, k, a, b):
        return k.multiply(a, b), None

    def backward(self, k, g, inputs, out, saved, needs):
        x, y = inputs
        return (unbroadcast(k, k.multiply(g, y), x) if needs[0] else None,
                unbroadcast(k, k.multiply(g, x), y) if needs[1] else None)

    def examples(self):
        return _broadcast_cases()


class Divide(KernelOp):
    """``a / b``."""

    def forward(self, k, a, b):
        return k.divide(a, b), None

    def backward(self, k, g, inputs, out, saved, needs):
        x, y = inputs
        gx = k.divide(g, y)
        gy = unbroadcast(k, k.negative(k.multiply(gx, out)), y) if needs[1] else None  # -g x / y^2 = -(g / y) out
        return unbroadcast(k, gx, x) if needs[0] else None, gy

    def examples(self):
        return cases(same=(normal(3, 4), away(3, 4)), row=(normal(3, 4), away(4)))


class Power(KernelOp):
    """``a ** b``."""

    def forward(self, k, a, b):
        return k.power(a, b), None

    def backward(self, k, g, inputs, out, saved, needs):
        x, y = inputs
        gx = gy = None
        if needs[0]:  # y x^(y-1)
            gx = unbroadcast(k, k.multiply(g, k.multiply(y, k.power(x, k.subtract(y, 1.0)))), x)
        if needs[1]:  # x^y log x; the base may be a Python number (2.0 ** y), which kernels don't take
            log_x = k.log(x) if hasattr(x, "shape") else math.log(x)
            gy = unbroadcast(k, k.multiply(g, k.multiply(out, log_x)), y)
        return gx, gy

    def examples(self):
        return cases(array_exponent=(positive(3, 4), normal(3, 4)), row_exponent=(positive(3, 4), normal(4)))


class Maximum(KernelOp):
    """The larger of ``a`` and ``b``, elementwise (the gradient goes to ``a`` on a tie)."""

    def forward(self, k, a, b):
        return k.maximum(a, b), None

    def backward(self, k, g, inputs, out, saved, needs):
        x, y = inputs
        mask = k.compare("greater_equal", x, y)
        return (unbroadcast(k, k.where(mask, g, 0.0), x) if needs[0] else None,
                unbroadcast(k, k.where(mask, 0.0, g), y) if needs[1] else None)

    def examples(self):
        return cases(same=(grid(3, 4), grid(3, 4, offset=0.125)))


def _swap_last(k, a):
    return k.transpose(a, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))


class Matmul(KernelOp):
    """``a @ b``, the matrix product (batched over leading axes; a vector operand is promoted as NumPy does)."""

    def forward(self, k, a, b):
        return k.matmul(a, b), None

    def backward(self, k, g, inputs, out, saved, needs):
        x, y = inputs
        # Promote vectors to matrices as matmul does, then undo it on the way out.
        x2 = x if x.ndim > 1 else k.reshape(x, (1, x.shape[0]))
        y2 = y if y.ndim > 1 else k.reshape(y, (y.shape[0], 1))
        g2 = g
        if x.ndim == 1:
            g2 = k.reshape(g2, g2.shape[:-1] + (1,) + g2.shape[-1:] if y.ndim > 1 else g2.shape + (1,))
        if y.ndim == 1:
            g2 = k.reshape(g2, g2.shape + (1,))
        gx = gy = None
        if needs[0]:
            gx = k.reshape(unbroadcast(k, k.matmul(g2, _swap_last(k, y2)), x2), x.shape)
        if needs[1]:
            gy = k.reshape(unbroadcast(k, k.matmul(_swap_last(k, x2), g2), y2), y.shape)
        return gx, gy

    def examples(self):
        return cases(**{"2d": (normal(3, 4), normal(4, 5)), "batched": (normal(2, 3, 4), normal(2, 4, 5)),
                           "broadcast-batch": (normal(2, 3, 4), normal(4, 5)),
                           "vector-matrix": (normal(4), normal(4, 5)), "matrix-vector": (normal(3, 4), normal(4)),
                           "vector-vector": (normal(4), normal(4)), "batch-vector": (normal(2, 3, 4), normal(4)),
                           "vector-batch": (normal(4), normal(2, 4, 5))})

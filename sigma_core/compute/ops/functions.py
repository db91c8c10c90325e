"""The core's elementwise functions (exp, log, the activations, clip), softmax and ``where``, as ops.

A function of one input has its VJP from the incoming gradient, its input and its output (:class:`Unary`); the
built-in activations' derivatives are functions of their output alone (``k.activation_backward``), which is
what lets the fused ``dense`` op keep no pre-activation.
"""

import numpy

from sigma_core.compute.ops.arithmetic import unbroadcast
from sigma_core.compute.ops.base import KernelOp, cases

normal, positive, away, grid = KernelOp.normal, KernelOp.positive, KernelOp.away, KernelOp.grid


class Unary(KernelOp):
    """``kernel(x)`` with the gradient ``rule(k, g, x, y)``; subclasses name both."""

    kernel = ""
    make = staticmethod(normal)  # the example's input: inside the function's domain, away from its kinks

    def forward(self, k, x):
        return getattr(k, self.kernel)(x), None

    def backward(self, k, g, inputs, out, saved, needs):
        return (self.rule(k, g, inputs[0], out),)

    def rule(self, k, g, x, y):
        raise NotImplementedError

    def examples(self):
        return cases(**{self.kernel: (self.make(3, 4),)})


class Copy(Unary):
    """A new array with ``a``'s values."""

    kernel = "copy"

    def rule(self, k, g, x, y):
        return g


class Negative(Unary):
    """``-a``."""

    kernel = "negative"

    def rule(self, k, g, x, y):
        return k.negative(g)


class Exp(Unary):
    """e to the ``a``."""

    kernel = "exp"

    def rule(self, k, g, x, y):
        return k.multiply(g, y)


class Log(Unary):
    """The natural logarithm of ``a``."""

    kernel, make = "log", staticmethod(positive)

    def rule(self, k, g, x, y):
        return k.divide(g, x)


class Sqrt(Unary):
    """The square root of ``a``."""

    kernel, make = "sqrt", staticmethod(positive)

    def rule(self, k, g, x, y):
        return k.divide(k.multiply(g, 0.5), y)


class Abs(Unary):
    """``|a|``."""

    kernel, make = "abs", staticmethod(away)

    def rule(self, k, g, x, y):
        return k.multiply(g, k.sign(x))


class Sign(Unary):
    """-1, 0 or 1 by the sign of ``a``; piecewise constant, so its gradient is 0 almost everywhere."""

    kernel, make = "sign", staticmethod(away)

    def rule(self, k, g, x, y):
        return None


class Activation(Unary):
    """A built-in activation: its derivative from its output (``k.activation_backward``)."""

    def rule(self, k, g, x, y):
        return k.activation_backward(self.kernel, g, y)


class Tanh(Activation):
    """The hyperbolic tangent of ``a``."""

    kernel = "tanh"


class Sigmoid(Activation):
    """``1 / (1 + exp(-a))``."""

    kernel = "sigmoid"


class Relu(Activation):
    """``max(a, 0)``."""

    kernel, make = "relu", staticmethod(away)


class Softplus(Activation):
    """``log(1 + exp(a))``, computed stably."""

    kernel = "softplus"


class Clip(KernelOp):
    """``a`` limited to [``low``, ``high``] (its gradient is 0 outside)."""

    def forward(self, k, x, *, low, high):
        return k.clip(x, low, high), None

    def backward(self, k, g, inputs, out, saved, needs, *, low, high):
        x = inputs[0]
        inside = k.multiply(k.compare("greater_equal", x, low), k.compare("less_equal", x, high))
        return (k.multiply(g, inside),)

    def examples(self):
        return [self.example("clip", grid(3, 4, offset=0.1), low=-0.5, high=0.5)]


class Softmax(KernelOp):
    """``exp(a) / sum(exp(a))`` along ``axis``, computed stably."""

    def forward(self, k, x, *, axis=-1):
        return k.softmax(x, axis), None

    def backward(self, k, g, inputs, out, saved, needs, *, axis=-1):
        dot = k.sum(k.multiply(g, out), axis=axis, keepdims=True)
        return (k.multiply(out, k.subtract(g, dot)),)

    def examples(self):
        return [self.example("last", normal(3, 4), axis=-1), self.example("first", normal(3, 4), axis=0)]


class LogSoftmax(Softmax):
    """``log(softmax(a))`` along ``axis``, computed stably."""

    def forward(self, k, x, *, axis=-1):
        return k.log_softmax(x, axis), None

    def backward(self, k, g, inputs, out, saved, needs, *, axis=-1):
        total = k.sum(g, axis=axis, keepdims=True)
        return (k.subtract(g, k.multiply(k.exp(out), total)),)


CONDITION = numpy.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])


class Where(KernelOp):
    """``a`` where ``condition`` (a mask) holds, else ``b``."""

    constants = (0,)

    def forward(self, k, condition, x, y):
        return k.where(condition, x, y), None

    def backward(self, k, g, inputs, out, saved, needs):
        condition, x, y = inputs
        return (None, unbroadcast(k, k.where(condition, g, 0.0), x) if needs[1] else None,
                unbroadcast(k, k.where(condition, 0.0, g), y) if needs[2] else None)

    def examples(self):
        return cases(same=(CONDITION, normal(3, 4), normal(3, 4)), broadcast=(CONDITION, normal(4), normal()))

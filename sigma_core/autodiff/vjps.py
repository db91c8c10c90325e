"""Vector-Jacobian products of every differentiable op, written once with kernels only.

Each takes the kernels ``k``, the incoming gradient ``g`` of the op's output, the op's raw inputs, its raw
output, what the forward pass saved, and ``needs`` (which inputs are traced: work for the others is skipped),
and returns one gradient per input (``None`` where not needed or not differentiable).
"""

import math


def _unbroadcast(k, grad, x):
    """Sum a broadcast gradient back to the shape of input ``x``."""
    return k.sum_to_shape(grad, getattr(x, "shape", ()))


def add(k, g, inputs, out, saved, needs):
    x, y = inputs
    return _unbroadcast(k, g, x) if needs[0] else None, _unbroadcast(k, g, y) if needs[1] else None


def subtract(k, g, inputs, out, saved, needs):
    x, y = inputs
    return _unbroadcast(k, g, x) if needs[0] else None, _unbroadcast(k, k.negative(g), y) if needs[1] else None


def multiply(k, g, inputs, out, saved, needs):
    x, y = inputs
    return (_unbroadcast(k, k.multiply(g, y), x) if needs[0] else None,
            _unbroadcast(k, k.multiply(g, x), y) if needs[1] else None)


def divide(k, g, inputs, out, saved, needs):
    x, y = inputs
    gx = k.divide(g, y)
    gy = None
    if needs[1]:  # -g x / y^2 = -(g / y) * out
        gy = _unbroadcast(k, k.negative(k.multiply(gx, out)), y)
    return (_unbroadcast(k, gx, x) if needs[0] else None, gy)


def power(k, g, inputs, out, saved, needs):
    x, y = inputs
    gx = gy = None
    if needs[0]:  # y x^(y-1)
        gx = _unbroadcast(k, k.multiply(g, k.multiply(y, k.power(x, k.subtract(y, 1.0)))), x)
    if needs[1]:  # x^y log x; the base may be a Python number (2.0 ** y), which kernels don't take
        log_x = k.log(x) if hasattr(x, "shape") else math.log(x)
        gy = _unbroadcast(k, k.multiply(g, k.multiply(out, log_x)), y)
    return gx, gy


def maximum(k, g, inputs, out, saved, needs):
    x, y = inputs
    mask = k.compare("greater_equal", x, y)
    return (_unbroadcast(k, k.where(mask, g, 0.0), x) if needs[0] else None,
            _unbroadcast(k, k.where(mask, 0.0, g), y) if needs[1] else None)


def where(k, g, inputs, out, saved, needs):
    condition, x, y = inputs
    return (None, _unbroadcast(k, k.where(condition, g, 0.0), x) if needs[1] else None,
            _unbroadcast(k, k.where(condition, 0.0, g), y) if needs[2] else None)


def _swap_last(k, a):
    return k.transpose(a, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))


def matmul(k, g, inputs, out, saved, needs):
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
        gx = k.reshape(_unbroadcast(k, k.matmul(g2, _swap_last(k, y2)), x2), x.shape)
    if needs[1]:
        gy = k.reshape(_unbroadcast(k, k.matmul(_swap_last(k, x2), g2), y2), y.shape)
    return gx, gy


def _unary(rule):
    """A one-input op's VJP from ``rule(k, g, x, y)``: its input's gradient from ``g``, input ``x``, output ``y``."""

    def vjp(k, g, inputs, out, saved, needs):
        return (rule(k, g, inputs[0], out),)

    return vjp


identity = _unary(lambda k, g, x, y: g)
negative = _unary(lambda k, g, x, y: k.negative(g))
exp = _unary(lambda k, g, x, y: k.multiply(g, y))
log = _unary(lambda k, g, x, y: k.divide(g, x))
sqrt = _unary(lambda k, g, x, y: k.divide(k.multiply(g, 0.5), y))
abs = _unary(lambda k, g, x, y: k.multiply(g, k.sign(x)))
sign = _unary(lambda k, g, x, y: None)  # piecewise constant: zero gradient almost everywhere
reshape = _unary(lambda k, g, x, y: k.reshape(g, x.shape))


def activation(name):
    """The VJP of a built-in activation, computed from the activation's output."""

    def vjp(k, g, inputs, out, saved, needs):
        return (k.activation_backward(name, g, out),)

    vjp.__name__ = f"activation_{name}"
    return vjp


def clip(k, g, inputs, out, saved, needs):
    x, low, high = inputs[0], saved[0], saved[1]
    inside = k.multiply(k.compare("greater_equal", x, low), k.compare("less_equal", x, high))
    return (k.multiply(g, inside),)


def _expand_reduced(k, g, x, axis, keepdims):
    """Reshape a reduction's gradient so it broadcasts against the input."""
    if keepdims or x.ndim == 0:
        return g
    axes = k.normalise_axes(axis, x.ndim)
    return k.reshape(g, tuple(1 if i in axes else n for i, n in enumerate(x.shape)))


def sum(k, g, inputs, out, saved, needs):
    x = inputs[0]
    axis, keepdims = saved
    return (k.broadcast_to(_expand_reduced(k, g, x, axis, keepdims), x.shape),)


def mean(k, g, inputs, out, saved, needs):
    x = inputs[0]
    axis, keepdims = saved
    count = math.prod(x.shape[a] for a in k.normalise_axes(axis, x.ndim))
    return (k.broadcast_to(k.multiply(_expand_reduced(k, g, x, axis, keepdims), 1.0 / count), x.shape),)


def _extremum(k, g, inputs, out, saved, needs):
    # The gradient flows to the extreme elements, split evenly between ties.
    x = inputs[0]
    axis, keepdims = saved
    hit = k.compare("equal", x, _expand_reduced(k, out, x, axis, keepdims))
    ties = k.sum(k.multiply(hit, 1.0), axis=k.normalise_axes(axis, x.ndim), keepdims=True)
    share = k.divide(_expand_reduced(k, g, x, axis, keepdims), ties)
    return (k.where(hit, share, 0.0),)


max = min = _extremum


def softmax(k, g, inputs, out, saved, needs):  # saved: the axis
    dot = k.sum(k.multiply(g, out), axis=saved, keepdims=True)
    return (k.multiply(out, k.subtract(g, dot)),)


def log_softmax(k, g, inputs, out, saved, needs):
    total = k.sum(g, axis=saved, keepdims=True)
    return (k.subtract(g, k.multiply(k.exp(out), total)),)


def softmax_cross_entropy(k, g, inputs, out, saved, needs):
    logits, targets = inputs
    return (k.softmax_cross_entropy_backward(g, saved, targets), None)


def dense(k, g, inputs, out, saved, needs):
    x, weights, bias = inputs
    gz = k.activation_backward(saved, g, out)
    gx = k.matmul(gz, k.transpose(weights)) if needs[0] else None
    gw = k.matmul(k.transpose(x), gz) if needs[1] else None
    gb = k.sum(gz, axis=0) if bias is not None and needs[2] else None
    return gx, gw, gb


def dropout(k, g, inputs, out, saved, needs):
    return (k.multiply(g, saved),)


def transpose(k, g, inputs, out, saved, needs):  # saved: the axes
    if saved is None:
        return (k.transpose(g),)
    inverse = sorted(range(len(saved)), key=lambda i: saved[i] % len(saved))
    return (k.transpose(g, tuple(inverse)),)


def getitem(k, g, inputs, out, saved, needs):
    return (k.scatter_add(inputs[0].shape, saved, g),)


def concatenate(k, g, inputs, out, saved, needs):
    axis = saved % g.ndim
    grads, start = [], 0
    for x, need in zip(inputs, needs):
        stop = start + x.shape[axis]
        index = (slice(None),) * axis + (slice(start, stop),)
        grads.append(k.copy(g[index]) if need else None)
        start = stop
    return tuple(grads)


def stack(k, g, inputs, out, saved, needs):
    axis = saved % g.ndim
    return tuple(
        k.copy(g[(slice(None),) * axis + (i,)]) if need else None for i, need in enumerate(needs)
    )

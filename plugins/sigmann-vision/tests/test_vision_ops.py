"""The vision ops on the numpy and cpu handlers: every example against central finite differences in float64
(the conformance kit runs the same examples on every handler distribution's own tests), float32 against
float64, and shape errors naming the op."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import ShapeError, create_handler, load_component
from sigmann_vision import OPS

#: Central differences with the step ∛eps balance truncation against round-off (~eps^(2/3) ≈ 4e-11 of the
#: values); √eps leaves room for that and catches a wrong VJP (off by O(1)).
EPS = float(numpy.finfo("float64").eps)
STEP, FD_TOLERANCE = EPS ** (1 / 3), EPS ** 0.5

EXAMPLES = [(name, label, make, params) for name in OPS for label, make, params in load_component("op", name)().examples()]


@pytest.mark.parametrize("name, label, make, params", EXAMPLES, ids=[f"{e[0]}-{e[1]}" for e in EXAMPLES])
def test_gradients_match_finite_differences(handler_name, name, label, make, params, taped):
    handler = create_handler(handler_name, dtype="float64", seed=0)
    values = make(numpy.random.default_rng(1))
    weights = numpy.random.default_rng(2).standard_normal

    def forward(vs):
        with handler.no_grad():
            return handler.op(name, *[handler.asarray(v) for v in vs], **params).to_numpy()

    seed = weights(forward(values).shape)
    _, grads = taped(handler, name, values, seed, **params)
    for position, (value, grad) in enumerate(zip(values, grads)):
        numeric = numpy.zeros_like(value)
        for index in numpy.ndindex(value.shape):
            shifted = [v.copy() for v in values]
            shifted[position][index] += STEP
            up = (forward(shifted) * seed).sum()
            shifted[position][index] -= 2 * STEP
            numeric[index] = (up - (forward(shifted) * seed).sum()) / (2 * STEP)
        numpy.testing.assert_allclose(grad, numeric, rtol=FD_TOLERANCE, atol=FD_TOLERANCE,
                                      err_msg=f"{name}-{label}: gradient of input {position}")


@pytest.mark.parametrize("name, label, make, params", EXAMPLES, ids=[f"{e[0]}-{e[1]}" for e in EXAMPLES])
def test_float32_agrees_with_float64(handler_name, name, label, make, params, taped, close):
    values = make(numpy.random.default_rng(3))
    seed = lambda shape: numpy.random.default_rng(4).standard_normal(shape)  # noqa: E731  (the same for both)
    wide = taped(create_handler("numpy", dtype="float64"), name, [v.copy() for v in values], seed, **params)
    narrow = taped(create_handler(handler_name, dtype="float32"), name, values, seed, **params)
    depth = max(v.size for v in values)  # no sum is wider than the largest input
    for what, a, b in zip(("output", *(f"gradient {i}" for i in range(len(values)))), (narrow[0], *narrow[1]),
                          (wide[0], *wide[1])):
        assert a.dtype == numpy.float32, what
        close(a, b, "float32", depth, f"{name}-{label}: {what}")


def test_ops_name_themselves_on_shape_errors():
    handler = create_handler("numpy", dtype="float64")
    x = handler.zeros((2, 4, 5, 5))
    with pytest.raises(ShapeError, match=r"conv2d: x \(2, 4, 5, 5\).*groups = 3"):
        handler.op("conv2d", x, handler.zeros((3, 1, 3, 3)), groups=3)
    with pytest.raises(ShapeError, match="conv2d: kernel"):
        handler.op("conv2d", x, handler.zeros((3, 4, 7, 3)))
    with pytest.raises(ShapeError, match="max_pool2d: padding .* more than half the kernel"):
        handler.op("max_pool2d", x, kernel=(2, 2), padding=(2, 0, 0, 0))
    with pytest.raises(ShapeError, match="batch_norm: training needs more than one value per channel"):
        c = handler.zeros(4)
        handler.op("batch_norm", handler.zeros((1, 4)), c, c, c, c, training=True)
    with pytest.raises(ShapeError, match="batch_norm: activation 'tanh' is not one of none, relu"):
        handler.op("batch_norm", handler.zeros((2, 4)), c, c, c, c, activation="tanh")
    with pytest.raises(ShapeError, match="layer_norm: takes x"):
        handler.op("layer_norm", x, handler.zeros(5), handler.zeros(5))


def test_batch_norm_moves_its_running_statistics_only_in_training():
    handler = create_handler("numpy", dtype="float64")
    rng = numpy.random.default_rng(0)
    x = rng.standard_normal((8, 3, 2, 2)) * 3 + 2
    mean, var = handler.zeros(3), handler.ones(3)
    one = handler.ones(3)
    handler.op("batch_norm", handler.asarray(x), one, handler.zeros(3), mean, var, training=False)
    assert (mean.to_numpy() == 0).all() and (var.to_numpy() == 1).all()
    handler.op("batch_norm", handler.asarray(x), one, handler.zeros(3), mean, var, training=True, momentum=0.25)
    numpy.testing.assert_allclose(mean.to_numpy(), 0.25 * x.mean(axis=(0, 2, 3)), rtol=1e-12)
    numpy.testing.assert_allclose(var.to_numpy(), 0.75 + 0.25 * x.var(axis=(0, 2, 3), ddof=1), rtol=1e-12)

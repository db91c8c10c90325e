"""Issue 15 item 5: ``check_layer`` passes every built-in layer of the core and catches broken ones."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import Layer
from sigmann_testing import check_layer

BUILT_IN = [
    ("dense", [(4,)], {"size": 5, "activation": "tanh"}),
    ("dense", [(2, 3)], {"size": 3, "activation": "sigmoid"}),
    ("dropout", [(6,)], {"p": 0.3}),
    ("elementwise", [(4,)], {}),
    ("concatenate", [(3,), (2,)], {}),
    ("add", [(3,), (3,)], {}),
    ("output", [(3,)], {}),
]


@pytest.mark.parametrize("layer, input_shapes, arguments", BUILT_IN, ids=[f"{t[0]}-{i}" for i, t in enumerate(BUILT_IN)])
def test_built_in_layers_pass_on_every_handler(layer, input_shapes, arguments, sigma_handlers):
    outputs = check_layer(layer, input_shapes, **arguments)
    assert "numpy" in sigma_handlers and set(outputs) == set(sigma_handlers)


class Scaled(Layer):
    """A correct toy layer: y = x * scale; subclasses below break it one way each."""

    def __init__(self, name, input_shapes):
        super().__init__(name, input_shapes)
        self.parameter_shapes = {"scale": self.input_shape}

    def forward(self, handler, inputs, params, context):
        return inputs[0] * params["scale"]


class WrongGradient(Scaled):
    def forward(self, handler, inputs, params, context):
        with handler.no_grad():  # half of the scale's gradient is lost
            scale = params["scale"] * 0.5
        return inputs[0] * params["scale"] * 0.5 + inputs[0] * scale


class UnusedParameter(Scaled):
    def __init__(self, name, input_shapes):
        super().__init__(name, input_shapes)
        self.parameter_shapes["offset"] = self.input_shape


class WrongShape(Scaled):
    def __init__(self, name, input_shapes):
        super().__init__(name, input_shapes)
        self.output_shape = (7,)


class Noisy(Scaled):
    calls = 0

    def forward(self, handler, inputs, params, context):
        Noisy.calls += 1
        return inputs[0] * params["scale"] + float(Noisy.calls)


def test_a_correct_layer_passes():
    check_layer(Scaled)


@pytest.mark.parametrize("layer, message", [
    (WrongGradient, r"layer on \w+ \(inference\): gradient of parameter 'scale' at \(\d+,\) is .*finite differences give"),
    (UnusedParameter, r"the output does not depend on parameter 'offset' \(is it used in forward\?\)"),
    (WrongShape, r"output shape \(3, 4\), expected \(3, 7\)"),
    (Noisy, "not deterministic"),
])
def test_broken_layers_are_caught_with_a_message_naming_the_problem(layer, message):
    with pytest.raises(AssertionError, match=message):
        check_layer(layer, handlers=["numpy"])


def test_given_inputs_are_fed_and_integer_ones_are_not_differentiated():
    """A layer whose input is ids (here: used as a mask, no gradient): the given batch is what the layer sees."""
    ids = numpy.array([[1, 0, 1, 1], [0, 0, 1, 0]])
    outputs = check_layer(Scaled, inputs=[ids], handlers=["numpy"])
    numpy.testing.assert_array_equal(outputs["numpy"] == 0, ids == 0)  # scale·0 is 0 exactly, scale·1 is not


def test_given_inputs_of_the_wrong_shape_are_named():
    with pytest.raises(AssertionError, match=r"inputs\[0\] has shape \(2, 3\), the layer takes \(batch, \*\(4,\)\)"):
        check_layer(Scaled, inputs=[numpy.zeros((2, 3))], handlers=["numpy"])

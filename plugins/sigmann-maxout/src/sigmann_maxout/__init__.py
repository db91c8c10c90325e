"""Maxout (Goodfellow et al., 2013): each output is the max of ``pieces`` linear units."""

import math

from sigma_core import Layer, default_weight_initialisers, hookimpl


class Maxout(Layer):
    def __init__(self, name, input_shapes, *, size, pieces=2):
        super().__init__(name, input_shapes)
        self.size, self.pieces = int(size), int(pieces)
        units = self.size * self.pieces
        self.output_shape = (self.size,)
        self.parameter_shapes = {"weights": (math.prod(self.input_shape), units), "biases": (units,)}

    def default_initialisers(self):
        return default_weight_initialisers()

    def forward(self, handler, inputs, params, context):
        x = handler.reshape(inputs[0], (inputs[0].shape[0], -1))
        z = handler.dense(x, params["weights"], params["biases"])  # fused, differentiable
        return handler.reshape(z, (-1, self.size, self.pieces)).max(axis=2)


@hookimpl
def register_layers(register):
    register("maxout", Maxout, description="max over linear pieces (Goodfellow et al. 2013)")

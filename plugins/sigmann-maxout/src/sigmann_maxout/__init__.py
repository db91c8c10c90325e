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


def export_maxout(graph, name, layer, inputs):
    """Maxout in ONNX, for ``sigma export --format onnx`` (sigmann-onnx): x·W + b, then each unit's max piece."""
    x = graph.op("Flatten", inputs, f"{name}/flat", axis=1)
    z = graph.op("Add", [graph.op("MatMul", [x, f"{name}.weights"], f"{name}/matmul"), f"{name}.biases"], f"{name}/add")
    pieces = graph.op("Reshape", [z, graph.constant(f"{name}/shape", [-1, layer.size, layer.pieces])], f"{name}/pieces")
    return graph.op("ReduceMax", [pieces], f"{name}/max", axes=[2], keepdims=0)


@hookimpl
def register_exporters(register):
    # Joins sigmann-onnx's layer-by-layer table; registering it needs no onnx, nor sigmann-onnx itself.
    register("onnx/maxout", export_maxout, description="a maxout layer in ONNX")

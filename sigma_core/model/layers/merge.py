"""Layers that merge branches: concatenation and (residual) addition."""

from sigma_core.errors import ShapeError
from sigma_core.model.layers.base import Layer


class Concatenate(Layer):
    """Joins its inputs along the last (feature) axis."""

    arity = None

    def __init__(self, name, input_shapes):
        super().__init__(name, input_shapes)
        first = self.input_shapes[0]
        for shape in self.input_shapes[1:]:
            if len(shape) != len(first) or shape[:-1] != first[:-1]:
                raise ShapeError(f"layer {name!r}: cannot concatenate shapes {first} and {shape} on the last axis")
        self.output_shape = first[:-1] + (sum(s[-1] for s in self.input_shapes),)

    def forward(self, handler, inputs, params, context):
        return handler.concatenate(inputs, axis=-1)


class Add(Layer):
    """Elementwise sum of its inputs, e.g. a residual connection."""

    arity = None

    def __init__(self, name, input_shapes):
        super().__init__(name, input_shapes)
        for shape in self.input_shapes[1:]:
            if shape != self.input_shapes[0]:
                raise ShapeError(f"layer {name!r}: cannot add shapes {self.input_shapes[0]} and {shape}")

    def forward(self, handler, inputs, params, context):
        return sum(inputs[1:], inputs[0])

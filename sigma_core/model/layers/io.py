"""Input and Output layers: where external data enters and leaves a network."""

import math

from sigma_core.errors import ArchitectureError, ShapeError
from sigma_core.model.layers.base import Layer


class Input(Layer):
    """Feeds the external array named ``external``, of shape (batch, *shape), into the network. A record of
    another shape is refused, even one with as many values: as in Keras, a silent reshape would hide a run file
    that describes other data than it reads."""

    arity = 0

    def __init__(self, name, input_shapes, *, shape, external="inputs"):
        super().__init__(name, input_shapes)
        self.output_shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
        self.external = external

    def forward(self, handler, inputs, params, context):
        try:
            x = context.externals[self.external]
        except KeyError:
            raise ArchitectureError(f"layer {self.name!r}: no external input {self.external!r} was provided "
                                    f"(given: {', '.join(context.externals) or 'none'})") from None
        if tuple(x.shape[1:]) != self.output_shape:
            same = x.ndim >= 2 and math.prod(x.shape[1:]) == math.prod(self.output_shape)
            raise ShapeError(f"layer {self.name!r}: input {self.external!r} has shape {tuple(x.shape)}, "
                             f"expected (batch, {', '.join(map(str, self.output_shape))})"
                             + ("; records are never reshaped: set the input layer's shape to the data's, "
                                f"shape = {list(x.shape[1:])}" if same else ""))
        return x


class Output(Layer):
    """Passes its input through and publishes it as the external output named ``external``."""

    def __init__(self, name, input_shapes, *, external="outputs"):
        super().__init__(name, input_shapes)
        self.external = external

    def forward(self, handler, inputs, params, context):
        return inputs[0]

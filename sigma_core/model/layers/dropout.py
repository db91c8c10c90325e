"""Inverted dropout."""

from sigma_core.model.layers.base import Layer


class Dropout(Layer):
    """Zero each activation with probability ``p`` during training, scale the rest by 1/(1-p), so inference
    is a plain pass-through with the same expected activation (Sigma did not rescale)."""

    def __init__(self, name, input_shapes, *, p):
        super().__init__(name, input_shapes)
        self.p = float(p)

    def forward(self, handler, inputs, params, context):
        if not context.training or self.p == 0.0:
            return inputs[0]
        return handler.dropout(inputs[0], self.p)

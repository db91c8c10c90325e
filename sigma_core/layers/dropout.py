"""Inverted dropout."""

from __future__ import annotations

from ..errors import ArchitectureError
from .base import Layer


class Dropout(Layer):
    """Zero each activation with probability ``p`` during training, scale the rest by 1/(1-p).

    The rescaling keeps the expected activation equal in training and
    inference, so inference is a plain pass-through (Sigma did not rescale).
    """

    def __init__(self, name, input_shapes, *, p):
        super().__init__(name, input_shapes)
        if not 0.0 <= float(p) < 1.0:
            raise ArchitectureError(f"layer {name!r}: dropout probability must be in [0, 1), got {p}")
        self.p = float(p)

    def forward(self, handler, inputs, params, context):
        if not context.training or self.p == 0.0:
            return inputs[0]
        return handler.dropout(inputs[0], self.p)

"""Plain gradient descent, Sigma's ``GradientDescentOptimiser``."""

from __future__ import annotations

from .base import Optimiser


class GradientDescent(Optimiser):
    """param −= learning_rate·grad. No memory."""

    rule = "sgd"

    def __init__(self, learning_rate=0.01, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)

    def arguments(self, step):
        return {"lr": self.learning_rate}

"""Adadelta (Zeiler, 2012, Algorithm 1), Sigma's ``AdadeltaOptimiser``."""

from __future__ import annotations

from .base import Optimiser


class Adadelta(Optimiser):
    """Adadelta; memory ``squared_gradient`` and ``squared_update`` (running averages).

    The paper has no learning rate; ``learning_rate`` (default 1.0, i.e. the
    paper) scales the step, as in PyTorch, so schedules still work. ``eps``
    sits inside both square roots, as in the paper.
    """

    memory_names = ("squared_gradient", "squared_update")
    rule = "adadelta"

    def __init__(self, learning_rate=1.0, rho=0.95, eps=1e-6, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.rho = rho
        self.eps = eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "rho": self.rho, "eps": self.eps}

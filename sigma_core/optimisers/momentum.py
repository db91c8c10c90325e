"""Gradient descent with (classical or Nesterov) momentum.

The velocity follows PyTorch: v = μ·v + g, param −= lr·v, with v starting at
zero (so the first step is plain gradient descent, like Sigma's v = g start).
Sigma folded the learning rate into the velocity (v = μ·v + lr·g, update −v);
that is the same trajectory for a constant learning rate, but here a schedule
changing ``learning_rate`` takes effect at once instead of fading in.
"""

from __future__ import annotations

from .base import Optimiser


class Momentum(Optimiser):
    """Classical momentum; memory ``velocity``."""

    memory_names = ("velocity",)
    rule = "momentum"
    nesterov = False

    def __init__(self, learning_rate=0.01, momentum=0.9, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.momentum = momentum

    def arguments(self, step):
        return {"lr": self.learning_rate, "momentum": self.momentum, "nesterov": self.nesterov}


class Nesterov(Momentum):
    """Nesterov momentum: param −= lr·(g + μ·v), v updated as in :class:`Momentum`."""

    nesterov = True

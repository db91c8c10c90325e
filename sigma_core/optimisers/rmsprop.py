"""RMSProp (Hinton's lecture 6e); not in Sigma."""

from __future__ import annotations

from .base import Optimiser


class RMSProp(Optimiser):
    """S = ρ·S + (1−ρ)·g²; param −= lr·g / (√S + eps). Memory ``squared_gradient``.

    ``eps`` is added after the square root, as in PyTorch.
    """

    memory_names = ("squared_gradient",)
    rule = "rmsprop"

    def __init__(self, learning_rate=0.001, rho=0.9, eps=1e-8, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.rho = rho
        self.eps = eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "rho": self.rho, "eps": self.eps}

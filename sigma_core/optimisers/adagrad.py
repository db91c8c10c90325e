"""Adagrad (Duchi et al., 2011), Sigma's ``AdagradOptimiser``."""

from __future__ import annotations

from .base import Optimiser


class Adagrad(Optimiser):
    """S += g²; param −= lr·g / (√S + eps). Memory ``squared_gradient_sum``.

    ``eps`` (Sigma's ``smoothing``, default 1e-6 as there) is added *after*
    the square root, as in PyTorch and TensorFlow; Sigma added it inside
    (√(S + eps)). The two differ only while S is of the order of eps.
    """

    memory_names = ("squared_gradient_sum",)
    rule = "adagrad"

    def __init__(self, learning_rate=0.01, eps=1e-6, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.eps = eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "eps": self.eps}

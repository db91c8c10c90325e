"""Adam (Kingma & Ba, 2015); not in Sigma."""

from __future__ import annotations

from .base import Optimiser


class Adam(Optimiser):
    """Adam with bias correction; memory ``first_moment`` and ``second_moment``.

    param −= lr·m̂ / (√v̂ + eps), m̂ and v̂ the bias-corrected moment averages
    (eps after the square root, as in the paper). ``weight_decay`` is the
    coupled L2 term of the base class, not AdamW's decoupled decay.
    """

    memory_names = ("first_moment", "second_moment")
    rule = "adam"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps, "step": step}

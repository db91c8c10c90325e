"""The built-in optimisers: each names its handler update rule (:meth:`Handler.optimiser_update`),
its per-parameter memory and the rule's arguments."""

from __future__ import annotations

from .base import Optimiser


class GradientDescent(Optimiser):
    """param −= learning_rate·grad, Sigma's ``GradientDescentOptimiser``. No memory."""

    rule = "sgd"
    stepwise = False

    def __init__(self, learning_rate=0.01, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)

    def arguments(self, step):
        return {"lr": self.learning_rate}


class Momentum(Optimiser):
    """Classical momentum as in PyTorch: v = μ·v + g, param −= lr·v; memory ``velocity``.

    v starts at zero, so the first step is plain gradient descent (like Sigma's
    v = g start). Sigma folded the learning rate into the velocity (v = μ·v + lr·g):
    the same trajectory for a constant rate, but here a schedule acts at once.
    """

    memory_names = ("velocity",)
    rule = "momentum"
    stepwise = False
    nesterov = False

    def __init__(self, learning_rate=0.01, momentum=0.9, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.momentum = momentum

    def arguments(self, step):
        return {"lr": self.learning_rate, "momentum": self.momentum, "nesterov": self.nesterov}


class Nesterov(Momentum):
    """Nesterov momentum: param −= lr·(g + μ·v), v updated as in :class:`Momentum`."""

    nesterov = True


class Adagrad(Optimiser):
    """Adagrad (Duchi et al., 2011), Sigma's ``AdagradOptimiser``: S += g²; param −= lr·g / (√S + eps).

    Memory ``squared_gradient_sum``. ``eps`` (Sigma's ``smoothing``) is added after
    the square root, as in PyTorch and TensorFlow; Sigma added it inside (√(S + eps)),
    which differs only while S is of the order of eps.
    """

    memory_names = ("squared_gradient_sum",)
    rule = "adagrad"
    stepwise = False

    def __init__(self, learning_rate=0.01, eps=1e-6, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.eps = eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "eps": self.eps}


class RMSProp(Optimiser):
    """RMSProp (Hinton's lecture 6e): S = ρ·S + (1−ρ)·g²; param −= lr·g / (√S + eps), eps after the root as
    in PyTorch. Memory ``squared_gradient``."""

    memory_names = ("squared_gradient",)
    rule = "rmsprop"
    stepwise = False

    def __init__(self, learning_rate=0.001, rho=0.9, eps=1e-8, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.rho, self.eps = rho, eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "rho": self.rho, "eps": self.eps}


class Adadelta(Optimiser):
    """Adadelta (Zeiler, 2012, Algorithm 1), Sigma's ``AdadeltaOptimiser``; memory ``squared_gradient`` and
    ``squared_update``. The paper has no learning rate: ``learning_rate`` (default 1.0, the paper) scales the
    step, as in PyTorch, so schedules still work. ``eps`` sits inside both square roots, as in the paper."""

    memory_names = ("squared_gradient", "squared_update")
    rule = "adadelta"
    stepwise = False

    def __init__(self, learning_rate=1.0, rho=0.95, eps=1e-6, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.rho, self.eps = rho, eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "rho": self.rho, "eps": self.eps}


class Adam(Optimiser):
    """Adam (Kingma & Ba, 2015; not in Sigma): param −= lr·m̂ / (√v̂ + eps), m̂ and v̂ the bias-corrected moment
    averages; memory ``first_moment`` and ``second_moment``. ``weight_decay`` is coupled L2, not AdamW's."""

    memory_names = ("first_moment", "second_moment")
    rule = "adam"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps, "step": step}

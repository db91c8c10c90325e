"""The optimisers: each names its update rule (:mod:`sigmann_optimisers.rules`), its memory and the rule's arguments.

They were the core's (``sigma_core.training.optimisers``) until the core kept only what every run needs: class
names, hyperparameters and memory names are unchanged, so their checkpoints resume bit for bit.
"""

from sigma_core import Optimiser


class Momentum(Optimiser):
    """Classical momentum as in PyTorch: v = μ·v + g, param −= lr·v; memory ``velocity``.

    Sigma folded the learning rate into the velocity (v = μ·v + lr·g): the same trajectory for a constant
    rate, but here a schedule acts at once.
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
    """Adagrad (Duchi et al., 2011): S += g²; param −= lr·g / (√S + eps); memory ``squared_gradient_sum``.

    ``eps`` (Sigma's ``smoothing``) is added after the square root, as in PyTorch; Sigma added it inside.
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


class Adadelta(RMSProp):
    """Adadelta (Zeiler, 2012, Algorithm 1): RMSProp's average of squared gradients and one of squared updates
    (memory ``squared_gradient``, ``squared_update``), ``eps`` inside both roots. The paper has no learning rate:
    ``learning_rate`` (default 1.0) scales the step, as in PyTorch, so schedules still work."""

    memory_names = ("squared_gradient", "squared_update")
    rule = "adadelta"

    def __init__(self, learning_rate=1.0, rho=0.95, eps=1e-6, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, rho, eps, weight_decay=weight_decay, freeze=freeze)

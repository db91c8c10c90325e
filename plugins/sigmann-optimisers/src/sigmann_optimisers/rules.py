"""The optimisers' update rules over the array module ``k.xp``: the reference every handler runs.

In place, through at most two pooled temporaries (``k.empty``): a warm step allocates nothing. Each rule's
:meth:`~sigma_core.UpdateRule.scalars` are the arguments its compiled kernels take after the arrays; the decay
rates' complements (1 − ρ) are computed there in double, as in the references (see ``sigma_core.UpdateRule``).
"""

from sigma_core import UpdateRule


def _scaled_step(k, param, grad, sq, tmp, lr, eps):
    """param −= lr·grad / (√sq + eps), through ``tmp``: Adagrad's and RMSProp's step."""
    xp = k.xp
    xp.sqrt(sq, out=tmp)
    xp.add(tmp, eps, out=tmp)
    xp.divide(grad, tmp, out=tmp)
    xp.multiply(tmp, lr, out=tmp)
    xp.subtract(param, tmp, out=param)


class MomentumRule(UpdateRule):
    """velocity = momentum·velocity + grad; param −= lr·velocity (Nesterov: lr·(grad + momentum·velocity))."""

    flops = 5

    def apply(self, k, param, grad, velocity, *, lr, momentum, nesterov):
        xp, tmp = k.xp, k.empty(param.shape)
        xp.multiply(velocity, momentum, out=velocity)
        xp.add(velocity, grad, out=velocity)
        if nesterov:
            xp.multiply(velocity, momentum, out=tmp)
            xp.add(tmp, grad, out=tmp)
            xp.multiply(tmp, lr, out=tmp)
        else:
            xp.multiply(velocity, lr, out=tmp)
        xp.subtract(param, tmp, out=param)

    def scalars(self, lr, momentum, nesterov):
        return (lr, momentum, bool(nesterov))

    def examples(self):
        return [("", 1, {"lr": 0.1, "momentum": 0.9, "nesterov": False}),
                ("nesterov", 1, {"lr": 0.1, "momentum": 0.9, "nesterov": True})]


class AdagradRule(UpdateRule):
    """sq += grad²; param −= lr·grad / (√sq + eps)."""

    flops = 6

    def apply(self, k, param, grad, sq, *, lr, eps):
        tmp = k.empty(param.shape)
        k.xp.multiply(grad, grad, out=tmp)
        k.xp.add(sq, tmp, out=sq)
        _scaled_step(k, param, grad, sq, tmp, lr, eps)

    def scalars(self, lr, eps):
        return (lr, eps)

    def examples(self):
        return [("", 1, {"lr": 0.02, "eps": 1e-6})]


class RMSPropRule(UpdateRule):
    """sq = ρ·sq + (1−ρ)·grad²; param −= lr·grad / (√sq + eps)."""

    flops = 8

    def apply(self, k, param, grad, sq, *, lr, rho, eps):
        tmp = k.empty(param.shape)
        self.decay(k, sq, grad, rho, tmp)
        _scaled_step(k, param, grad, sq, tmp, lr, eps)

    def scalars(self, lr, rho, eps):
        return (lr, rho, 1.0 - rho, eps)

    def examples(self):
        return [("", 1, {"lr": 0.01, "rho": 0.9, "eps": 1e-8}), ("rho-0.9999", 1, {"lr": 0.01, "rho": 0.9999, "eps": 1e-8})]


class AdadeltaRule(UpdateRule):
    """Zeiler (2012), Algorithm 1, with the step scaled by ``lr``.

    acc_grad = ρ·acc_grad + (1−ρ)·grad²;  delta = √(acc_update + eps) / √(acc_grad + eps) · grad
    acc_update = ρ·acc_update + (1−ρ)·delta²;  param −= lr·delta
    """

    flops = 14

    def apply(self, k, param, grad, acc_grad, acc_update, *, lr, rho, eps):
        xp, tmp, delta = k.xp, k.empty(param.shape), k.empty(param.shape)
        self.decay(k, acc_grad, grad, rho, tmp)
        xp.add(acc_update, eps, out=delta)
        xp.sqrt(delta, out=delta)
        xp.add(acc_grad, eps, out=tmp)
        xp.sqrt(tmp, out=tmp)
        xp.divide(delta, tmp, out=delta)
        xp.multiply(delta, grad, out=delta)
        self.decay(k, acc_update, delta, rho, tmp)
        xp.multiply(delta, lr, out=delta)
        xp.subtract(param, delta, out=param)

    def scalars(self, lr, rho, eps):
        return (lr, rho, 1.0 - rho, eps)

    def examples(self):
        return [("", 2, {"lr": 1.0, "rho": 0.95, "eps": 1e-6}), ("rho-0.9999", 2, {"lr": 1.0, "rho": 0.9999, "eps": 1e-6})]

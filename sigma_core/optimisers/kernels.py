"""Raw-array optimiser update kernels, mixed into a handler's kernels.

Each kernel updates a parameter and its memory *in place* over ``self.xp``
with ``out=``, taking at most two pooled temporaries from ``self.empty``, so a
training step after warm-up allocates nothing. The optimiser classes call them
as ``handler.kernels.<name>``; a backend overrides one with a truly one-pass
version (a numba loop, a CUDA elementwise kernel) and every optimiser speeds
up without changing.

Arguments are raw arrays of one shape (``param``, ``grad`` and the memory
buffers) and Python floats; ``step`` counts from 1.
"""

from __future__ import annotations

import math


class OptimiserKernels:
    """Mixin of in-place update kernels; needs ``xp`` and ``empty`` from ArrayKernels."""

    def l2_gradient(self, grad, param, weight_decay):
        """grad + weight_decay·param, into a pooled buffer (L2 regularisation)."""
        xp = self.xp
        out = self.empty(param.shape)
        xp.multiply(param, weight_decay, out=out)
        xp.add(out, grad, out=out)
        return out

    def sgd_update_(self, param, grad, lr):
        """param −= lr·grad."""
        xp = self.xp
        tmp = self.empty(param.shape)
        xp.multiply(grad, lr, out=tmp)
        xp.subtract(param, tmp, out=param)

    def momentum_update_(self, param, grad, velocity, lr, momentum, nesterov):
        """velocity = momentum·velocity + grad; param −= lr·velocity.

        With ``nesterov`` the step looks ahead: param −= lr·(grad + momentum·velocity).
        """
        xp = self.xp
        xp.multiply(velocity, momentum, out=velocity)
        xp.add(velocity, grad, out=velocity)
        tmp = self.empty(param.shape)
        if nesterov:
            xp.multiply(velocity, momentum, out=tmp)
            xp.add(tmp, grad, out=tmp)
            xp.multiply(tmp, lr, out=tmp)
        else:
            xp.multiply(velocity, lr, out=tmp)
        xp.subtract(param, tmp, out=param)

    def adagrad_update_(self, param, grad, sq, lr, eps):
        """sq += grad²; param −= lr·grad / (√sq + eps)."""
        xp = self.xp
        tmp = self.empty(param.shape)
        xp.multiply(grad, grad, out=tmp)
        xp.add(sq, tmp, out=sq)
        xp.sqrt(sq, out=tmp)
        xp.add(tmp, eps, out=tmp)
        xp.divide(grad, tmp, out=tmp)
        xp.multiply(tmp, lr, out=tmp)
        xp.subtract(param, tmp, out=param)

    def adadelta_update_(self, param, grad, acc_grad, acc_update, lr, rho, eps):
        """Zeiler (2012), Algorithm 1, with the step scaled by ``lr``.

        acc_grad = ρ·acc_grad + (1−ρ)·grad²
        delta = √(acc_update + eps) / √(acc_grad + eps) · grad
        acc_update = ρ·acc_update + (1−ρ)·delta²
        param −= lr·delta
        """
        xp = self.xp
        tmp = self.empty(param.shape)
        delta = self.empty(param.shape)
        xp.multiply(grad, grad, out=tmp)
        xp.multiply(tmp, 1.0 - rho, out=tmp)
        xp.multiply(acc_grad, rho, out=acc_grad)
        xp.add(acc_grad, tmp, out=acc_grad)
        xp.add(acc_update, eps, out=delta)
        xp.sqrt(delta, out=delta)
        xp.add(acc_grad, eps, out=tmp)
        xp.sqrt(tmp, out=tmp)
        xp.divide(delta, tmp, out=delta)
        xp.multiply(delta, grad, out=delta)
        xp.multiply(delta, delta, out=tmp)
        xp.multiply(tmp, 1.0 - rho, out=tmp)
        xp.multiply(acc_update, rho, out=acc_update)
        xp.add(acc_update, tmp, out=acc_update)
        xp.multiply(delta, lr, out=delta)
        xp.subtract(param, delta, out=param)

    def rmsprop_update_(self, param, grad, sq, lr, rho, eps):
        """sq = ρ·sq + (1−ρ)·grad²; param −= lr·grad / (√sq + eps)."""
        xp = self.xp
        tmp = self.empty(param.shape)
        xp.multiply(grad, grad, out=tmp)
        xp.multiply(tmp, 1.0 - rho, out=tmp)
        xp.multiply(sq, rho, out=sq)
        xp.add(sq, tmp, out=sq)
        xp.sqrt(sq, out=tmp)
        xp.add(tmp, eps, out=tmp)
        xp.divide(grad, tmp, out=tmp)
        xp.multiply(tmp, lr, out=tmp)
        xp.subtract(param, tmp, out=param)

    def adam_update_(self, param, grad, m, v, lr, beta1, beta2, eps, step):
        """Adam (Kingma & Ba) with bias correction, eps outside the root.

        m = β1·m + (1−β1)·grad;  v = β2·v + (1−β2)·grad²
        param −= lr/(1−β1^step) · m / (√v / √(1−β2^step) + eps)
        which is the paper's m̂/(√v̂ + eps) without materialising m̂ and v̂.
        """
        xp = self.xp
        tmp = self.empty(param.shape)
        xp.multiply(m, beta1, out=m)
        xp.multiply(grad, 1.0 - beta1, out=tmp)
        xp.add(m, tmp, out=m)
        xp.multiply(v, beta2, out=v)
        xp.multiply(grad, grad, out=tmp)
        xp.multiply(tmp, 1.0 - beta2, out=tmp)
        xp.add(v, tmp, out=v)
        xp.sqrt(v, out=tmp)
        xp.multiply(tmp, 1.0 / math.sqrt(1.0 - beta2**step), out=tmp)
        xp.add(tmp, eps, out=tmp)
        xp.divide(m, tmp, out=tmp)
        xp.multiply(tmp, lr / (1.0 - beta1**step), out=tmp)
        xp.subtract(param, tmp, out=param)

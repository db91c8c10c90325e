"""The ``cpu`` handler's kernels of the update rules: each rule as one numba loop over the parameter.

Registered as ``kernels={"cpu": "sigmann_optimisers.cpu:..."}``, so only the ``cpu`` handler (sigmann-cpu, which
brings numba) imports this module. A ``cpu`` kernel of an update rule is the rule with a ``loop``: a
``sigma_cpu.serial_and_parallel`` pair taking the flattened arrays, then the rule's ``scalars`` (floats in the
arrays' dtype); the handler runs the reference where the arrays are not C-contiguous in its dtype. One pass reads
each array once, where the reference's ufuncs read them four to nine times.
"""

from __future__ import annotations

import math

from sigma_cpu import serial_and_parallel  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)

from . import rules  # noqa: E402


@serial_and_parallel
def _momentum(param, grad, velocity, lr, momentum, nesterov):
    for i in numba.prange(param.size):
        v = momentum * velocity[i] + grad[i]
        velocity[i] = v
        param[i] -= lr * (grad[i] + momentum * v) if nesterov else lr * v


@serial_and_parallel
def _adagrad(param, grad, sq, lr, eps):
    for i in numba.prange(param.size):
        s = sq[i] + grad[i] * grad[i]
        sq[i] = s
        param[i] -= lr * grad[i] / (math.sqrt(s) + eps)


# The decay rates' complements (rest = 1 − rho) come in computed in double on the host:
# 1 − rho in the array's float32 would carry rho's rounding error, 2e-4 relative at 0.9999.
@serial_and_parallel
def _rmsprop(param, grad, sq, lr, rho, rest, eps):
    for i in numba.prange(param.size):
        s = rho * sq[i] + rest * grad[i] * grad[i]
        sq[i] = s
        param[i] -= lr * grad[i] / (math.sqrt(s) + eps)


@serial_and_parallel
def _adadelta(param, grad, acc_grad, acc_update, lr, rho, rest, eps):
    for i in numba.prange(param.size):
        a = rho * acc_grad[i] + rest * grad[i] * grad[i]
        acc_grad[i] = a
        delta = math.sqrt(acc_update[i] + eps) / math.sqrt(a + eps) * grad[i]
        acc_update[i] = rho * acc_update[i] + rest * delta * delta
        param[i] -= lr * delta


class MomentumRule(rules.MomentumRule):
    loop = _momentum


class AdagradRule(rules.AdagradRule):
    loop = _adagrad


class RMSPropRule(rules.RMSPropRule):
    loop = _rmsprop


class AdadeltaRule(rules.AdadeltaRule):
    loop = _adadelta

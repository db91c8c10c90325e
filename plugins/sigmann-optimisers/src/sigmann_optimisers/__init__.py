"""Sigma's optimisers beyond the core's SGD and Adam: momentum, Nesterov, Adagrad, RMSProp, Adadelta.

Each is a :class:`sigma_core.Optimiser` (:mod:`.optimisers`) naming an update rule (:mod:`.rules`, a
:class:`sigma_core.UpdateRule`) that ``handler.optimiser_update`` runs; the ``cpu`` handler runs each rule as one
numba loop (:mod:`.cpu`, a ``"module:attr"`` kernel, so only that handler imports numba). Discovery imports this
module for every ``sigma`` command: the classes are imported on first use.
"""

import importlib

from sigma_core import hookimpl

#: The public names, each imported from its module on first use.
_LAZY = {name: "optimisers" for name in ("Momentum", "Nesterov", "Adagrad", "RMSProp", "Adadelta")}
__all__ = list(_LAZY)

#: Update rule -> (its class, in :mod:`.rules` and, with a ``loop``, in :mod:`.cpu`; a line for ``sigma plugins``).
_RULES = {
    "momentum": ("MomentumRule", "velocity = μ·velocity + g; param -= lr·velocity (Nesterov: lr·(g + μ·velocity))"),
    "adagrad": ("AdagradRule", "S += g²; param -= lr·g / (√S + eps)"),
    "rmsprop": ("RMSPropRule", "S = ρ·S + (1−ρ)·g²; param -= lr·g / (√S + eps)"),
    "adadelta": ("AdadeltaRule", "Zeiler's Algorithm 1, the step scaled by lr"),
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'sigmann_optimisers' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(f"sigmann_optimisers.{_LAZY[name]}"), name)
    return value


@hookimpl
def register_optimisers(register):
    for name, cls, description in [
        ("momentum", "Momentum", "gradient descent with classical momentum"),
        ("nesterov", "Nesterov", "gradient descent with Nesterov momentum"),
        ("adagrad", "Adagrad", "per-element rates from summed squared gradients"),
        ("adadelta", "Adadelta", "Zeiler's Adadelta (Algorithm 1)"),
        ("rmsprop", "RMSProp", "rates from a running mean of squared gradients"),
    ]:
        register(name, f"sigmann_optimisers.optimisers:{cls}", description=description)


@hookimpl
def register_update_rules(register):
    for name, (cls, description) in _RULES.items():
        register(name, f"sigmann_optimisers.rules:{cls}", description=description,
                 kernels={"cpu": f"sigmann_optimisers.cpu:{cls}"})

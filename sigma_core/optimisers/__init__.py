"""Optimisers: gradient descent, momentum, Adagrad, Adadelta, RMSProp, Adam.

:mod:`.base` holds the contract and :mod:`.rules` the built-in optimisers; the
update arithmetic is a handler op (:meth:`~sigma_core.handler.Handler.optimiser_update`)
a backend may override. Run files name an optimiser by its registered name (``"adam"``).
"""

from __future__ import annotations

from sigma_core import plugins

from .base import Optimiser
from .rules import Adadelta, Adagrad, Adam, GradientDescent, Momentum, Nesterov, RMSProp


def optimiser_from_config(config: dict) -> Optimiser:
    """A registered optimiser from ``{"type": name, **constructor arguments}``, e.g.
    ``{"type": "adagrad", "learning_rate": 0.02, "freeze": ["*.biases"]}``; see :func:`sigma_core.plugins.build`."""
    return plugins.build("optimiser", config)


__all__ = ["Adadelta", "Adagrad", "Adam", "GradientDescent", "Momentum", "Nesterov", "Optimiser", "RMSProp",
           "optimiser_from_config"]

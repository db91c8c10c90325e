"""Optimisers: gradient descent, momentum, Adagrad, Adadelta, RMSProp, Adam.

Each concept lives in its own module; :mod:`.base` holds the contract. The
update arithmetic is a handler op (:meth:`~sigma_core.handler.Handler.optimiser_update`)
a backend may override. Run files name an optimiser by its registered name
(``"adam"``); see :func:`optimiser_from_config`.
"""

from __future__ import annotations

from sigma_core import plugins

from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .base import Optimiser
from .momentum import Momentum, Nesterov
from .rmsprop import RMSProp
from .sgd import GradientDescent


def optimiser_from_config(config: dict) -> Optimiser:
    """Build a registered optimiser from ``{"type": name, **constructor arguments}``.

    For example ``{"type": "adagrad", "learning_rate": 0.02, "freeze": ["*.biases"]}``; see :func:`sigma_core.plugins.build`.
    """
    return plugins.build("optimiser", config)


__all__ = [
    "Adadelta",
    "Adagrad",
    "Adam",
    "GradientDescent",
    "Momentum",
    "Nesterov",
    "Optimiser",
    "RMSProp",
    "optimiser_from_config",
]

"""Optimisers: gradient descent, momentum, Adagrad, Adadelta, RMSProp, Adam.

Each concept lives in its own module; :mod:`.base` holds the contract and
:mod:`.kernels` the raw-array update kernels a backend may override. Run
files name an optimiser by its registered name (``"adam"``); see
:func:`optimiser_from_config`.
"""

from __future__ import annotations

import inspect

from sigma_core import plugins
from sigma_core.errors import ConfigError

from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .base import Optimiser
from .momentum import Momentum, Nesterov
from .rmsprop import RMSProp
from .sgd import GradientDescent


def optimiser_from_config(config: dict) -> Optimiser:
    """Build a registered optimiser from ``{"type": name, **constructor arguments}``.

    For example ``{"type": "adagrad", "learning_rate": 0.02, "freeze": ["*.bias"]}``.
    An unknown or missing key is a :class:`ConfigError` that names it.
    """
    if not isinstance(config, dict) or "type" not in config:
        raise ConfigError(f"an optimiser config needs a 'type' key (e.g. 'adam'), got {config!r}")
    arguments = dict(config)
    name = arguments.pop("type")
    cls = plugins.load("optimiser", name)
    signature = inspect.signature(cls)
    unknown = sorted(set(arguments) - set(signature.parameters))
    if unknown:
        raise ConfigError(
            f"optimiser {name!r}: unknown key(s) {', '.join(unknown)} "
            f"(accepted: {', '.join(signature.parameters)})"
        )
    try:
        signature.bind(**arguments)
    except TypeError as error:
        raise ConfigError(f"optimiser {name!r}: {error}") from None
    return cls(**arguments)


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

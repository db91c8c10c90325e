"""Optimisers: gradient descent, momentum, Adagrad, Adadelta, RMSProp, Adam.

:mod:`.base` holds the contract and :mod:`.rules` the built-in optimisers; the
update arithmetic is a handler op (:meth:`~sigma_core.handler.Handler.optimiser_update`)
a backend may override. Run files name an optimiser by its registered name (``"adam"``).
"""

from __future__ import annotations

from .base import Optimiser
from .rules import Adadelta, Adagrad, Adam, GradientDescent, Momentum, Nesterov, RMSProp

__all__ = ["Adadelta", "Adagrad", "Adam", "GradientDescent", "Momentum", "Nesterov", "Optimiser", "RMSProp"]

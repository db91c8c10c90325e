"""Stoppers: end training at an epoch, when a value stops improving, or on NaN/Inf.

They run last in an event, after the hooks whose results they judge.
"""

from __future__ import annotations

import logging

from ..errors import ConfigError, NonFiniteError, first_non_finite
from .base import Hook
from .criteria import Extrema

log = logging.getLogger("sigma.hooks")


class StopTraining(Hook):
    """Stops once ``at_epoch`` epochs are done, or when its criteria (``.on(...)``) pass."""

    default_scale = "epoch"
    default_target = "global"
    default_priority = 10000

    def __init__(self, at_epoch: int | None = None, *, every=None):
        if at_epoch is not None and (not isinstance(at_epoch, int) or at_epoch < 1):
            raise ConfigError(f"stop: at_epoch must be an integer >= 1, got {at_epoch!r}")
        super().__init__(every, parameters={"at_epoch": at_epoch}, requires=("epoch",))
        self.at_epoch = at_epoch

    def invoke(self, registry, resolver):
        if self.at_epoch is None or registry["epoch"] >= self.at_epoch:
            log.info("stopping after epoch %d iteration %d (%r)", registry["epoch"], registry["iteration"], self)
            self.operator.signal_stop()


class EarlyStopping(Hook):
    """Stops when ``value`` has not reached a new best (``mode`` min or max) for ``patience`` firings in a row."""

    default_scale = "epoch"
    default_target = "global"
    default_priority = 10000

    def __init__(self, value: str, *, patience: int = 5, mode: str = "max", every=None):
        if not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"early_stopping: patience must be an integer >= 1, got {patience!r}")
        super().__init__(every, parameters={"value": value, "patience": patience, "mode": mode}, requires=(value,))
        self.value, self.patience = value, patience
        self._best = Extrema(value, mode)
        self._misses = 0

    def invoke(self, registry, resolver):
        if self._best.check(resolver):
            self._misses = 0
            return
        self._misses += 1
        if self._misses >= self.patience:
            log.info("early stopping: %s has not improved on %.6g for %d checks",
                     self.value, self._best.best, self._misses)
            self.operator.signal_stop()


class StopOnNonFinite(Hook):
    """Stops with :class:`NonFiniteError` naming the first parameter that holds NaN or Inf, and where.

    Each parameter is checked on its device (:meth:`Handler.all_finite`); only a failing one is copied.
    """

    default_priority = 10000

    def __init__(self, *, every=None):
        super().__init__(every, requires=("network.self",))

    def invoke(self, registry, resolver):
        network = registry["network"]["self"]
        for parameter_id, array in network.parameters.items():
            if not network.handler.all_finite(array):
                raise NonFiniteError(f"parameter {parameter_id!r} holds {first_non_finite(array.to_numpy())} "
                                     f"(epoch {registry['epoch']}, iteration {registry['iteration']}); "
                                     "training stopped")

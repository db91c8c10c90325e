"""Stoppers: end training at an epoch, when a value stops improving, or on NaN/Inf.

They run last in an event (priority 10000), after the hooks whose results
they judge, and stop through the operator, which ends the run after the
current iteration or epoch.
"""

from __future__ import annotations

import logging
import numpy

from ..errors import ConfigError, NonFiniteError
from . import timestep
from .base import Hook
from .criteria import Extrema

log = logging.getLogger("sigma.hooks")


class StopTraining(Hook):
    """Stops once ``at_epoch`` epochs are done, or when its criteria (``.on(...)``) pass."""

    default_target = "global"
    default_priority = 10000

    def __init__(self, at_epoch: int | None = None, *, every=None):
        if at_epoch is not None and (not isinstance(at_epoch, int) or at_epoch < 1):
            raise ConfigError(f"stop: at_epoch must be an integer >= 1, got {at_epoch!r}")
        super().__init__(every or timestep.every(1, "epoch"), parameters={"at_epoch": at_epoch}, requires=("epoch",))
        self.at_epoch = at_epoch

    def invoke(self, registry, resolver):
        if self.at_epoch is None or registry["epoch"] >= self.at_epoch:
            log.info("stopping after epoch %d iteration %d (%r)", registry["epoch"], registry["iteration"], self)
            self.operator.signal_stop()


class EarlyStopping(Hook):
    """Stops when ``value`` has not reached a new best (``mode`` min or max) for ``patience`` firings in a row."""

    default_target = "global"
    default_priority = 10000

    def __init__(self, value: str, *, patience: int = 5, mode: str = "max", every=None):
        if not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"early_stopping: patience must be an integer >= 1, got {patience!r}")
        super().__init__(every or timestep.every(1, "epoch"),
                         parameters={"value": value, "patience": patience, "mode": mode}, requires=(value,))
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
    """Stops with :class:`NonFiniteError` when a parameter holds NaN or Inf, naming it and the element.

    Each parameter is checked by its handler (:meth:`Handler.all_finite`,
    cheap and on-device); only a failing one is copied to find the element.
    """

    default_priority = 10000

    def __init__(self, *, every=None):
        super().__init__(every or timestep.every(1, "iteration"), requires=("network.self",))

    def invoke(self, registry, resolver):
        network = registry["network"]["self"]
        handler = network.handler
        for parameter_id, array in network.parameters.items():
            if not handler.all_finite(array):
                values = array.to_numpy()
                index = tuple(int(i) for i in numpy.argwhere(~numpy.isfinite(values))[0])
                value = values[index]
                raise NonFiniteError(
                    f"parameter {parameter_id!r} holds {value} at index {list(index)} "
                    f"(epoch {registry['epoch']}, iteration {registry['iteration']}); training stopped"
                )


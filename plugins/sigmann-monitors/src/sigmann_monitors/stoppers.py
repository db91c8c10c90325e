"""Stoppers: end training at an epoch, when a value stops improving, or on NaN/Inf.

They run last at an event (``order``), after the hooks whose results they judge, and stop at the loop's next
iteration boundary with a ``reason`` that ``sigma train`` prints as the run's last line, exit status 0: reaching
a criterion is a success (NaN/Inf is not: :class:`StopOnNonFinite` raises).
"""

from sigma_core import Best, Hook, NonFiniteError, first_non_finite, require


class StopTraining(Hook):
    """Stops once ``at_epoch`` epochs are done; without ``at_epoch``, the first time it runs (``every``)."""

    order = 100

    def __init__(self, at_epoch: int | None = None, *, every=(1, "epoch")):
        require("stop: at_epoch", "int >= 1 or null", at_epoch)
        self.at_epoch, self.every = at_epoch, every

    def check(self, report=None):
        if self.at_epoch is None or self.run.values["epoch"] >= self.at_epoch:
            when = "its first check" if self.at_epoch is None else f"at_epoch = {self.at_epoch}"
            self.run.command("stop", reason=f"hook {self.name!r} ({when})")

    on_iteration = on_epoch = check


class EarlyStopping(Hook):
    """Stops when the run value ``value`` has not reached a new best (``mode`` min or max) for ``patience``
    checks in a row; it checks after every epoch (``every``)."""

    order = 100

    def __init__(self, value: str = "validation.accuracy", *, patience: int = 5, mode: str = "max",
                 every=(1, "epoch")):
        require("early_stopping: patience", "int >= 1", patience)
        self.value, self.patience, self.every = value, patience, every
        self.best = Best(value, mode, "early_stopping")
        self._misses = 0

    def check(self, report=None):
        if self.best.update(self.run.values):
            self._misses = 0
            return
        self._misses += 1
        if self._misses >= self.patience:
            self.run.command("stop", reason=f"early stopping ({self.value} has not improved on {self.best.value:.6g} "
                                            f"for {self._misses} checks)")

    on_iteration = on_epoch = check


class StopOnNonFinite(Hook):
    """Stops with :class:`NonFiniteError` naming the first parameter that holds NaN or Inf, and where.

    Each parameter is checked on its device (:meth:`Handler.all_finite`) every ``every`` iterations; only a
    failing one is copied.
    """

    order = 100
    argument_rules = {"every": "int >= 1"}

    def __init__(self, *, every: int = 1):
        self.every = every

    def on_iteration(self):
        trainer = self.run.trainer
        for parameter_id, array in trainer.network.parameters.items():
            if not trainer.handler.all_finite(array):
                raise NonFiniteError(f"parameter {parameter_id!r} holds {first_non_finite(array.to_numpy())} "
                                     f"(epoch {trainer.epoch}, iteration {trainer.iteration}); training stopped")

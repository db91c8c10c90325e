"""Learning-rate schedules: set the optimiser's rate for the next step from the steps (or epochs) done.

A schedule sets the first step's rate when the run attaches it, and again after a reset; ``base`` defaults to
the run file's ``optimiser.learning_rate`` (its optimiser's default where the file sets none), and for a run
built in code to the optimiser's rate when it attaches.
"""

import math

from sigma_core import Hook, require, resolved_config


class LearningRateSchedule(Hook):
    """Base class: implement :meth:`factor` of the base rate at time ``t`` (steps or epochs done); subclasses
    pass their settings as keywords, each of which becomes an attribute."""

    order = -100  # before the hooks that report the rate

    def __init__(self, *, per: str = "iteration", base: float | None = None, **settings):
        require(f"{type(self).__name__}: per", ("iteration", "epoch"), per)
        self.per, self.base = per, base
        self.every = 1 if per == "iteration" else (1, "epoch")
        vars(self).update(settings)

    def factor(self, t: int) -> float:
        raise NotImplementedError

    def rate(self, t: int) -> float:
        return self.base * self.factor(t)

    def attach(self, run):
        super().attach(run)
        if self.base is None:
            self.base = _configured_rate(run)
        self.apply()

    def apply(self, report=None) -> None:
        """Set the rate for the next step."""
        trainer = self.run.trainer
        self.run.optimiser.learning_rate = self.rate(trainer.epoch if self.per == "epoch" else trainer.total_iterations)

    on_iteration = on_epoch = on_reset = apply


class StaircaseSchedule(LearningRateSchedule):
    """``base · gamma^⌊t / period⌋``: multiply by gamma every ``period`` iterations or epochs (PyTorch's StepLR)."""

    def __init__(self, period: int, *, gamma: float = 0.1, per: str = "epoch", base: float | None = None):
        super().__init__(per=per, base=base, period=period, gamma=gamma)

    def factor(self, t):
        return self.gamma ** (t // self.period)


class ExponentialSchedule(LearningRateSchedule):
    """``base · gamma^t``."""

    def __init__(self, gamma: float, *, per: str = "epoch", base: float | None = None):
        super().__init__(per=per, base=base, gamma=gamma)

    def factor(self, t):
        return self.gamma ** t


class CosineSchedule(LearningRateSchedule):
    """Cosine annealing from ``base`` to ``base · minimum`` over ``period``, then held at the minimum."""

    def __init__(self, period: int, *, minimum: float = 0.0, per: str = "iteration", base: float | None = None):
        super().__init__(per=per, base=base, period=period, minimum=minimum)

    def factor(self, t):
        progress = min(t, self.period) / self.period
        return self.minimum + (1.0 - self.minimum) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmUp(LearningRateSchedule):
    """Linear warm-up from ``base · start`` to ``base`` over ``period``, then ``base``."""

    def __init__(self, period: int, *, start: float = 0.0, per: str = "iteration", base: float | None = None):
        super().__init__(per=per, base=base, period=period, start=start)

    def factor(self, t):
        return self.start + (1.0 - self.start) * min(t, self.period) / self.period


def _configured_rate(run) -> float:
    """The rate the run file gives its optimiser. Not the optimiser's own rate: a resumed run's optimiser holds the
    rate scheduled when its checkpoint was written, which as a base would apply the schedule twice."""
    optimiser = resolved_config(run.config)["optimiser"] if run.config is not None else {}
    return float(optimiser.get("learning_rate", run.optimiser.learning_rate))

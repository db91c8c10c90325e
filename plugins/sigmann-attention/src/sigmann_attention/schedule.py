"""The ``warm_up_cosine`` schedule: a linear warm-up, then cosine decay, as one learning-rate schedule.

sigmann-monitors' ``warm_up`` and ``cosine_schedule`` hooks each set the
optimiser's rate every step from the same base, so attached together the later
one wins; a GPT wants both in sequence (nanoGPT's ``get_lr``). This is
sigmann-monitors' cosine schedule with the warm-up in front of it.
"""

from __future__ import annotations

from sigma_core import ConfigError
from sigmann_monitors.schedules import CosineSchedule


class WarmUpCosine(CosineSchedule):
    """``base · t / warm_up`` for the first ``warm_up`` iterations, then the cosine annealing from ``base``
    to ``base · minimum`` over the remaining ``period − warm_up``, then held at the minimum."""

    argument_rules = {"period": "int >= 1", "warm_up": "int >= 0", "minimum": "number >= 0"}

    def __init__(self, period: int, warm_up: int, *, minimum: float = 0.0, base: float | None = None):
        if warm_up >= period:
            raise ConfigError(f"warm_up_cosine: warm_up = {warm_up} leaves nothing of period = {period} to decay")
        super().__init__(period - warm_up, minimum=minimum, per="iteration", base=base)
        self.warm_up = warm_up

    def factor(self, t):
        return t / self.warm_up if t < self.warm_up else super().factor(t - self.warm_up)

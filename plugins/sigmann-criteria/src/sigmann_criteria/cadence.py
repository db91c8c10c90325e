"""Cadences: when a hook fires, counted in events of one time scale.

A :class:`Cadence` is a description; each run of a hook keeps its own
:class:`Countdown` of it, counting from when the run attaches the hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sigma_core import ConfigError


class TimeScale(str, Enum):
    """The events of a run (see :mod:`sigma_core.hooks.base` for when each fires)."""

    ITERATION = "iteration"
    EPOCH = "epoch"
    START = "start"
    STOP = "stop"
    PAUSE = "pause"
    RESUME = "resume"
    RESET = "reset"

    @classmethod
    def parse(cls, value) -> TimeScale:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            names = ", ".join(scale.value for scale in cls)
            raise ConfigError(f"unknown time scale {value!r} (time scales: {names})") from None


@dataclass(frozen=True)
class Cadence:
    """Fire on every ``interval``-th event of ``scale``, at most ``live`` times (-1: forever)."""

    scale: TimeScale
    interval: int = 1
    live: int = -1

    def __post_init__(self):
        object.__setattr__(self, "scale", TimeScale.parse(self.scale))
        if not isinstance(self.interval, int) or self.interval < 1:
            raise ConfigError(f"a cadence's interval must be an integer >= 1, got {self.interval!r}")
        if not isinstance(self.live, int) or self.live == 0 or self.live < -1:
            raise ConfigError(f"a cadence's live time must be -1 (forever) or >= 1, got {self.live!r}")

    def countdown(self) -> Countdown:
        return Countdown(self)

    def __str__(self):
        times = "" if self.live == -1 else f", at most {self.live} time{'s' * (self.live > 1)}"
        return f"every {self.interval} {self.scale.value}{'s' * (self.interval > 1)}{times}"


def every(interval: int, scale="iteration", live: int = -1) -> Cadence:
    """``every(10, "iteration")``; ``live=k`` stops it after k firings."""
    return Cadence(scale, interval, live)


def after(interval: int, scale="iteration") -> Cadence:
    """Fire once, on the ``interval``-th event of ``scale``."""
    return Cadence(scale, interval, 1)


def cadence_from_config(value, where: str) -> Cadence:
    """``[10, "iteration"]``, ``[1, "epoch", 3]`` (live time) or ``"epoch"`` from a run file."""
    try:
        if isinstance(value, str):
            return every(1, value)
        if isinstance(value, list) and len(value) in (2, 3) and isinstance(value[0], int) and isinstance(value[1], str):
            return every(*value)
    except ConfigError as error:  # a bad scale, interval or live time: say whose
        raise ConfigError(f"{where}: {error}") from None
    raise ConfigError(f"{where} must be [interval, \"scale\"] or [interval, \"scale\", live], got {value!r}")


class Countdown:
    """One scope's running copy of a :class:`Cadence`: counts events and live time."""

    __slots__ = ("cadence", "remaining", "lives")

    def __init__(self, cadence: Cadence):
        self.cadence = cadence
        self.remaining = cadence.interval
        self.lives = cadence.live

    @property
    def dead(self) -> bool:
        """The cadence has used up its live time; it never fires again."""
        return self.lives == 0

    def tick(self) -> bool:
        """Count one event of the cadence's scale; True when the hook should fire now."""
        if self.lives == 0:
            return False
        self.remaining -= 1
        if self.remaining > 0:
            return False
        self.remaining = self.cadence.interval
        if self.lives > 0:
            self.lives -= 1
        return True

"""Invoke criteria: conditions on registry values that gate a hook's firing.

``hook.on(criteria)`` makes a hook fire only when its time step is due *and*
the criteria pass. Criteria combine with ``&``, ``|`` and ``~`` and repeat with
:meth:`Criteria.repeated`. Several keep state between checks (the best value so
far, the previous outcome, a count), so a combination checks every part every
time instead of short-circuiting, which would feed an extremum stale values.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

from ..errors import ConfigError
from .access import read_number

COMPARISONS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq}


class Criteria:
    """Base class: implement :meth:`check`; ``required_entries`` lists what it reads (copied for background hooks)."""

    @property
    def required_entries(self) -> tuple[str, ...]:
        return ()

    def check(self, resolver) -> bool:
        raise NotImplementedError

    def __and__(self, other: Criteria) -> Criteria:
        return All((self, other))

    def __or__(self, other: Criteria) -> Criteria:
        return Any((self, other))

    def __invert__(self) -> Criteria:
        return Not(self)

    def repeated(self, times: int, without_interruption: bool = False) -> Criteria:
        """Pass on every ``times``-th pass of this criterion (consecutive ones if ``without_interruption``)."""
        return Repeated(self, times, without_interruption)


@dataclass(eq=True)
class Threshold(Criteria):
    """``value <op> target``; with ``rising_edge`` only the check where it turns true passes."""

    value: str
    op: str
    target: float
    rising_edge: bool = False
    _was_true: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self):
        if self.op not in COMPARISONS:
            raise ConfigError(f"threshold on {self.value!r}: unknown comparison {self.op!r} "
                              f"(use {', '.join(COMPARISONS)})")

    @property
    def required_entries(self):
        return (self.value,)

    def check(self, resolver) -> bool:
        now = COMPARISONS[self.op](read_number(resolver, self.value, "threshold criteria"), self.target)
        passed = now and not self._was_true if self.rising_edge else now
        self._was_true = now
        return passed


@dataclass(eq=True)
class Extrema(Criteria):
    """Passes on the first value and on every new minimum or maximum (``mode``) after it."""

    value: str
    mode: str = "max"
    best: float = field(default=math.nan, compare=False, repr=False)  # NaN before the first check

    def __post_init__(self):
        if self.mode not in ("min", "max"):
            raise ConfigError(f"extrema on {self.value!r}: mode must be 'min' or 'max', got {self.mode!r}")

    @property
    def required_entries(self):
        return (self.value,)

    def check(self, resolver) -> bool:
        current = read_number(resolver, self.value, "extrema criteria")
        if math.isnan(self.best) or (current < self.best if self.mode == "min" else current > self.best):
            self.best = current
            return True
        return False


@dataclass(eq=True)
class Repeated(Criteria):
    """Passes each time ``base`` has passed ``times`` times; ``without_interruption``: in a row."""

    base: Criteria
    times: int
    without_interruption: bool = False
    _count: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.times, int) or self.times < 1:
            raise ConfigError(f"repeated criteria need times >= 1, got {self.times!r}")

    @property
    def required_entries(self):
        return self.base.required_entries

    def check(self, resolver) -> bool:
        if self.base.check(resolver):
            self._count += 1
        elif self.without_interruption:
            self._count = 0
        if self._count >= self.times:
            self._count = 0
            return True
        return False


@dataclass(eq=True)
class _Combination(Criteria):
    parts: tuple

    @property
    def required_entries(self):
        return tuple(dict.fromkeys(entry for part in self.parts for entry in part.required_entries))


class All(_Combination):
    """Passes when every part passes (``a & b``)."""

    def check(self, resolver) -> bool:
        return all([part.check(resolver) for part in self.parts])

    def __and__(self, other):
        return All((*self.parts, other))


class Any(_Combination):
    """Passes when some part passes (``a | b``)."""

    def check(self, resolver) -> bool:
        return any([part.check(resolver) for part in self.parts])

    def __or__(self, other):
        return Any((*self.parts, other))


@dataclass(eq=True)
class Not(Criteria):
    """Passes when ``base`` does not (``~a``)."""

    base: Criteria

    @property
    def required_entries(self):
        return self.base.required_entries

    def check(self, resolver) -> bool:
        return not self.base.check(resolver)


class External(Criteria):
    """Set from outside the training loop (a UI, a signal handler); :meth:`pulse` passes exactly the next check."""

    def __init__(self, initial: bool = False):
        self.state = bool(initial)
        self._pulse = False

    def set(self, state: bool) -> None:
        self.state = bool(state)

    def toggle(self) -> None:
        self.state = not self.state

    def pulse(self) -> None:
        self._pulse = True

    def check(self, resolver) -> bool:
        passed, self._pulse = self.state or self._pulse, False
        return passed

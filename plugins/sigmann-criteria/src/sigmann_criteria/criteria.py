"""Invoke criteria: conditions on registry values that gate a hook's firing.

``hook.on(criteria)`` (``on = {...}`` in a run file, see :func:`criteria_from_config`)
makes a hook fire only when its cadence is due *and* the criteria pass. Criteria combine with ``&``, ``|`` and ``~`` and repeat with
:meth:`Criteria.repeated`. Several keep state between checks (the best value so
far, the previous outcome, a count), so a combination checks every part every
time instead of short-circuiting, which would feed an extremum stale values.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from sigma_core import Best, ConfigError

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
    """``value <op> limit``; with ``rising_edge`` only the check where it turns true passes."""

    value: str
    op: str
    limit: float
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
        now = COMPARISONS[self.op](read_number(resolver, self.value, "threshold criteria"), self.limit)
        passed = now and not self._was_true if self.rising_edge else now
        self._was_true = now
        return passed


@dataclass(eq=True)
class Extrema(Criteria):
    """Passes on the first value and on every new minimum or maximum (``mode``) after it."""

    value: str
    mode: str = "max"
    best: Best = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self.best = Best(self.value, self.mode, f"extrema on {self.value!r}")

    @property
    def required_entries(self):
        return (self.value,)

    def check(self, resolver) -> bool:
        return self.best.offer(read_number(resolver, self.value, "extrema criteria"))


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


def criteria_from_config(spec, where: str):
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a table such as {{ extrema = \"optimiser.cost_total\", mode = \"min\" }}")
    spec = dict(spec)
    times, without_interruption = spec.pop("repeated", None), spec.pop("without_interruption", False)
    kinds = [kind for kind in ("threshold", "extrema", "all", "any", "not") if kind in spec]
    if len(kinds) != 1:
        raise ConfigError(f"{where} needs exactly one of threshold, extrema, all, any, not; got {sorted(spec)}")
    kind = kinds[0]
    allowed = {"threshold": {"threshold", "op", "value", "rising_edge"}, "extrema": {"extrema", "mode"}}.get(kind, {kind})
    if unknown := sorted(set(spec) - allowed):
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} for a {kind} criterion "
                          f"(allowed: {', '.join(sorted(allowed))}, repeated, without_interruption)")
    if kind == "threshold":
        if "op" not in spec or "value" not in spec:
            raise ConfigError(f"{where}: a threshold needs op (>, <, >=, <=, ==) and value")
        criteria = Threshold(spec["threshold"], spec["op"], spec["value"], spec.get("rising_edge", False))
    elif kind == "extrema":
        criteria = Extrema(spec["extrema"], spec.get("mode", "max"))
    elif kind == "not":
        criteria = Not(criteria_from_config(spec["not"], f"{where}.not"))
    else:
        if not isinstance(spec[kind], list) or not spec[kind]:
            raise ConfigError(f"{where}.{kind} must be a non-empty array of criteria")
        parts = tuple(criteria_from_config(part, f"{where}.{kind}[{i}]") for i, part in enumerate(spec[kind]))
        criteria = All(parts) if kind == "all" else Any(parts)
    return criteria.repeated(times, without_interruption) if times is not None else criteria

"""Hooks from a run file's ``[[hooks]]`` tables::

    [[hooks]]
    type = "value_reporter"                        # any hook registered through register_hooks
    values = ["optimiser.cost_total"]              # the hook's constructor arguments, checked by name
    every = [1, "iteration"]                       # [interval, scale] or [interval, scale, live]
    on = { extrema = "optimiser.cost_total", mode = "min" }   # also priority, background, target

``on`` is one criterion or a combination::

    { threshold = "optimiser.cost_total", op = "<", value = 0.1, rising_edge = true }
    { all = [ {...}, {...} ] }   { any = [ ... ] }   { not = {...} }
    { ..., repeated = 3, without_interruption = true }   # on any of the above
"""

from __future__ import annotations

import inspect

from .. import plugins
from ..arguments import check, require
from ..errors import ConfigError, SigmaError
from .criteria import All, Any, Extrema, Not, Threshold
from .timestep import timestep_from_config

COMMON_KEYS = ("type", "every", "on", "priority", "background", "target")


def hooks_from_config(tables: list) -> list:
    """One hook per ``[[hooks]]`` table, in order."""
    if not isinstance(tables, list):
        raise ConfigError("hooks must be an array of tables: [[hooks]] with type = ...")
    return [hook_from_config(table, f"hooks[{i}]") for i, table in enumerate(tables)]


def hook_from_config(table: dict, where: str = "hooks"):
    if not isinstance(table, dict) or "type" not in table:
        raise ConfigError(f"{where} must be a table with a type, e.g. {{ type = \"value_reporter\", ... }}")
    cls = plugins.load("hook", table["type"])
    settings = {key: value for key, value in table.items() if key not in COMMON_KEYS}
    check(where, cls, settings, label=f"hook {table['type']!r}", given=("every",), shared=COMMON_KEYS)
    if "every" in table:
        if "every" not in inspect.signature(cls).parameters:
            raise ConfigError(f"{where}.every: hook {table['type']!r} sets its own time step; remove 'every'")
        try:
            settings["every"] = timestep_from_config(table["every"], f"{where}.every")
        except ConfigError as error:  # TimeStep's own checks do not know the key; timestep_from_config's do
            message = str(error)
            raise ConfigError(message if message.startswith(where) else f"{where}.every: {message}") from None
    try:
        hook = cls(**settings)
        if "on" in table:
            hook.on(criteria_from_config(table["on"], f"{where}.on"))
        if "priority" in table:
            require(f"{where}.priority", "int", table["priority"])
            hook.with_priority(table["priority"])
        if table.get("background"):
            hook.in_background()
        if "target" in table:
            hook.targeting(table["target"])
    except SigmaError:
        raise
    except (TypeError, ValueError) as error:  # a value no declared rule caught; --debug shows where it failed
        raise ConfigError(f"{where}: hook {table['type']!r}: {error}") from error
    return hook


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

"""Hooks from a run file and the command line: ``[[hooks]]`` tables, and ``sigma train --monitor NAME[:key=value,...]``.

::

    [[hooks]]
    type = "metrics"        # any hook registered through register_hooks
    every = 10              # the hook's constructor arguments, checked by name

``[[monitors]]`` tables are read the same way: monitors and hooks are one kind now.
"""

from __future__ import annotations

import inspect

from .. import plugins
from ..errors import ConfigError
from .base import Hook, HookError, schedule

#: Keys Sigma's declarative hooks (the sigmann-criteria distribution) take, and what to do on a hook that does not.
CRITERIA_KEYS = {
    "on": "criteria gate sigmann-criteria's hooks; the checkpoint hook keeps the best epochs itself "
          "(best = \"validation.accuracy\", mode = \"max\")",
    "priority": "hooks run in the order they are listed",
    "background": "a hook decides itself whether it runs on its own thread",
    "target": "every hook runs once per event, on the run's state",
}


def hooks_from_tables(tables, where: str = "hooks") -> list[Hook]:
    """One hook per table of ``tables`` (a run file's ``[[hooks]]``, or ``--monitor`` options), named by its type."""
    if not isinstance(tables, list):
        raise ConfigError(f"{where} must be an array of tables: [[{where}]] with type = ...")
    hooks = []
    for index, table in enumerate(tables):
        at = f"{where}[{index}]"
        if isinstance(table, dict) and isinstance(table.get("type"), str):
            _refuse_criteria_keys(table, at)
        hook = plugins.build("hook", table, where=at)
        if not isinstance(hook, Hook):
            raise ConfigError(f"{at}: hook {table['type']!r} is {type(hook).__name__}, not a sigma_core.Hook")
        hook.name = table["type"]
        try:
            schedule(hook)
        except HookError as error:
            raise ConfigError(f"{at}.every: {error}") from None
        hooks.append(hook)
    return hooks


def _refuse_criteria_keys(table: dict, where: str) -> None:
    """One clear line for an older run file's criteria key on a hook that does not take it."""
    cls = plugins.load("hook", table["type"])
    try:
        accepted = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in accepted.values()):
        return  # it takes any key: its constructor says what it makes of one
    for key, advice in CRITERIA_KEYS.items():
        if key in table and key not in accepted:
            raise ConfigError(f"{where}.{key}: hook {table['type']!r} does not take {key!r}: {advice}")


def parse_hook_option(text: str) -> dict:
    """``"metrics:every=10,values=['epoch']"`` -> ``{"type": "metrics", "every": 10, ...}`` (``--monitor``).

    Values are read as TOML values, as ``--set`` reads them, and otherwise as strings.
    """
    from ..config import parse_value

    name, _, rest = text.partition(":")
    if not name.strip():
        raise ConfigError(f"--monitor {text!r}: expected NAME or NAME:key=value,...")
    spec = {"type": name.strip()}
    for item in filter(None, _split_top_level(rest)):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ConfigError(f"--monitor {text!r}: {item!r} is not key=value")
        spec[key.strip()] = parse_value(value)
    return spec


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes (so lists survive)."""
    parts, depth, quote, current = [], 0, None, []
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    parts.append("".join(current).strip())
    return parts

"""Hooks from a run file and the command line: ``[[hooks]]`` tables, and ``sigma train --monitor NAME[:key=value,...]``.

::

    [[hooks]]
    type = "metrics"        # any hook registered through register_hooks
    every = 10              # the hook's constructor arguments, checked by name

``[[monitors]]`` tables are read the same way: monitors and hooks are one kind now.
"""

from __future__ import annotations

from .. import plugins
from ..errors import ConfigError, SigmaError
from .base import Hook, HookError, could_be_ctrl_c, failure, schedule


def hooks_from_tables(tables: list[dict], where: str = "hooks") -> list[Hook]:
    """One hook per table of ``tables`` (a run file's ``[[hooks]]``, or ``--monitor`` options), named by its type.

    Each table's keys are checked against its hook's constructor (:func:`sigma_core.config.check`), which
    also tells an older run file's criteria keys (``on``, ``priority``, ...) apart from typos.
    """
    hooks = []
    for index, table in enumerate(tables):
        at = f"{where}[{index}]"
        try:
            hook = plugins.build("hook", table, where=at)
        except BaseException as error:  # a plugin's constructor: one line naming it, before anything trains
            if isinstance(error, SigmaError) or could_be_ctrl_c(error):
                raise
            raise HookError(f"{at}: hook {table['type']!r} failed in {failure('__init__', error)}") from error
        if not isinstance(hook, Hook):
            raise ConfigError(f"{at}: hook {table['type']!r} is {type(hook).__name__}, not a sigma_core.Hook")
        hook.name = table["type"]
        try:
            schedule(hook)
        except HookError as error:
            raise ConfigError(f"{at}.every: {error}") from None
        hooks.append(hook)
    return hooks


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

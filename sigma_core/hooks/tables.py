"""Hooks from a run file's ``[[hooks]]`` tables (``[[monitors]]``, the older name, too) and from
``sigma train --monitor NAME[:key=value,...]``: ``type`` names a hook registered through ``register_hooks``,
the other keys are its constructor's arguments, checked by name."""

import re

from sigma_core import plugins
from sigma_core.config import parse_value
from sigma_core.errors import ConfigError, SigmaError
from sigma_core.hooks.base import Hook, HookError, could_be_ctrl_c, failure, schedule


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
            key, _, why = str(error).partition(": ")
            if isinstance(error, ConfigError) and key in table:  # the hook's own check of that key: say whose
                raise ConfigError(f"{at}.{key}: hook {table['type']!r}: {why}") from None
            if isinstance(error, SigmaError) or could_be_ctrl_c(error):
                raise
            raise HookError(f"{at}: hook {table['type']!r} failed in {failure('__init__', error)}") from error
        if not isinstance(hook, Hook):
            raise ConfigError(f"{at}: hook {table['type']!r} is {type(hook).__name__}, not a sigma_core.Hook")
        hook.name, hook.table = table["type"], table
        try:
            schedule(hook)
        except HookError as error:
            raise ConfigError(f"{at}.every: {error}") from None
        hooks.append(hook)
    return hooks


def parse_hook_option(text: str) -> dict:
    """``"metrics:every=10,values=['epoch']"`` -> ``{"type": "metrics", "every": 10, ...}`` (``--monitor``).

    A comma followed by ``key=`` starts the next option (so lists keep theirs); values are read as TOML
    values, as ``--set`` reads them, and otherwise as strings.
    """
    name, _, rest = text.partition(":")
    if not name.strip():
        raise ConfigError(f"--monitor {text!r}: expected NAME or NAME:key=value,...")
    spec = {"type": name.strip()}
    for item in filter(None, re.split(r",(?=\s*[A-Za-z_][\w-]*\s*=)", rest.strip().rstrip(","))):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ConfigError(f"--monitor {text!r}: {item!r} is not key=value")
        spec[key.strip()] = parse_value(value.strip())
    return spec

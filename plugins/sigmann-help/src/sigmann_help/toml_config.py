"""``sigma config``: a run file with every component's default filled in, as TOML (``sigma train --print-config``).

The resolving is the core's (``sigma_core.resolved_config``, which sigmann-mlflow logs too); writing TOML, which
Python reads (tomllib) but cannot write, is tomli_w's, here.
"""

import json
import re

import tomli_w

from sigma_core import cli_options, load_run_file, parse_hook_option, resolved_config


def run(args) -> int:
    cfg = load_run_file(args.config, cli_options.run_overrides(args))
    cfg["hooks"] += [parse_hook_option(text) for text in args.monitors]  # with --monitor's: the run
    print(config_toml(resolved_config(cfg)), end="")
    return 0


def config_toml(config: dict) -> str:
    """``config`` as TOML (written by tomli_w). TOML has no null: each unset value (None), and each value with no
    TOML form, is left out and named in a comment at the top (``# hooks[0].directory: unset``)."""
    notes = []
    text = tomli_w.dumps(_writable(config, "", notes))
    return "".join(f"# {note}\n" for note in notes) + ("\n" if notes and text else "") + text


_LEFT_OUT = object()


def _writable(value, where: str, notes: list):
    """``value`` without what TOML cannot hold, or ``_LEFT_OUT``: each left out is noted in ``notes``. An array
    holding a value TOML cannot hold is left out whole (dropping an item would renumber the rest)."""
    if isinstance(value, dict):
        kept = {key: _writable(item, f"{where}.{_key(key)}" if where else _key(key), notes)
                for key, item in value.items()}
        return {key: item for key, item in kept.items() if item is not _LEFT_OUT}
    if isinstance(value, (list, tuple)):
        inner = []
        items = [_writable(item, f"{where}[{index}]", inner) for index, item in enumerate(value)]
        if all(item is not _LEFT_OUT for item in items):
            notes += inner  # unset values of the tables in it
            return items
    elif isinstance(value, (str, int, float)):  # bool is an int
        return value
    notes.append(f"{where}: {'unset' if value is None else repr(value)}")
    return _LEFT_OUT


def _key(key: str) -> str:
    """``key`` as TOML writes it: bare, or quoted (JSON's escapes are TOML's, but for DEL, which TOML wants escaped)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key).replace("\x7f", "\\u007f")

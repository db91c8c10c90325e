"""Run files: one TOML file describes a whole run (the README's run-file reference lists every key).

Every key is checked against :data:`SCHEMA`, so a typo is an error that names
the key. ``--set training.epochs=3`` overrides any key, ``network.layers.1.size``
a list entry; the value is read as a TOML value (``3``, ``0.5``, ``"adam"``,
``[1, 2]``) and otherwise as a string.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

from .errors import ConfigError

#: key -> rule: a type (``dict``: a table the component it builds checks), a tuple of the allowed values,
#: a dict of the table's keys and their rules, or None (anything: its reader checks it).
SCHEMA = {
    "name": str,
    "seed": int,
    "handler": {"name": str, "dtype": ("float32", "float64")},
    "data": dict,
    "split": {"validation": None, "train": None, "shuffle": bool, "seed": int},
    "network": {"layers": list},
    "initialisers": dict,
    "optimiser": dict,
    "training": {"batch_size": int, "epochs": int, "last_batch": ("keep", "drop"), "shuffle": bool,
                 "validation_batch_size": int, "prefetch": int, "compile": str, "replay": bool},
    "checkpoint": {"directory": str, "every_iterations": int, "every_epochs": int, "keep": int},
    "hooks": list,  # [[hooks]] tables, see sigma_core.hooks.tables
    "monitors": list,  # [[monitors]] tables: the older name for [[hooks]]
    "operator": dict,  # how the loop trains an iteration, see sigma_core.loop
}

#: lower bounds of numeric settings
MINIMUMS = {"seed": 0, "split.seed": 0, "checkpoint.every_iterations": 0, "checkpoint.every_epochs": 0,
            "checkpoint.keep": 1, "training.epochs": 1, "training.batch_size": 1, "training.validation_batch_size": 1,
            "training.prefetch": 0}

DEFAULTS = {
    "name": "run",
    "seed": 0,
    "handler": {"name": "auto", "dtype": "float32"},
    "split": {"validation": 0.2, "shuffle": True},
    "initialisers": {},
    "optimiser": {"type": "sgd", "learning_rate": 0.1},
    "training": {"batch_size": 32, "epochs": 10, "last_batch": "keep", "shuffle": True, "validation_batch_size": 1000,
                 "prefetch": 2, "compile": "auto"},
    # off unless every_iterations or every_epochs is set; see sigma_core.checkpoint
    "checkpoint": {"directory": "checkpoints", "every_iterations": 0, "every_epochs": 0, "keep": 3},
    "hooks": [],
    "monitors": [],
    "operator": {},
}


def load(path, overrides=()) -> dict:
    """Read, override and validate a run file; errors name the file and the key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read run file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    for override in overrides:
        apply_override(raw, override)
    return validate(raw, source=str(path))


def parse_value(text: str):
    """A ``--set`` value as TOML (numbers, booleans, strings, arrays), else the raw string."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(config: dict, assignment: str):
    """Apply ``"a.b.c=value"`` to nested tables in place; a number addresses a list entry (``network.layers.1.size``)."""
    key, sep, value = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    *path, name = key.split(".")
    node = config
    for depth, part in enumerate([*path, name]):
        where = ".".join(path[:depth]) or key
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"--set {key}: {where} is a list of {len(node)}; {part!r} is not an index 0..{len(node) - 1}")
            part = int(part)
        elif not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {where} is not a table or a list")
        if depth == len(path):
            node[part] = parse_value(value.strip())
        else:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]


def validate(raw: dict, source: str = "config") -> dict:
    """Check every key against :data:`SCHEMA` and fill in defaults."""
    for key, value in raw.items():
        if key not in SCHEMA:
            raise ConfigError(f"{source}: unknown key {key!r} (allowed: {', '.join(SCHEMA)})")
        _check(key, value, SCHEMA[key], source)
    for required in ("data", "network"):
        if required not in raw:
            raise ConfigError(f"{source}: missing [{required}] section")
    if not raw["network"].get("layers"):
        raise ConfigError(f"{source}: network.layers is empty; list the layers with [[network.layers]]")
    config = copy.deepcopy(DEFAULTS)
    for key, value in raw.items():  # a section with a schema keeps the defaults of the keys it leaves out
        config[key] = {**config.get(key, {}), **value} if isinstance(SCHEMA[key], dict) else value
    _older_replay_key(raw.get("training", {}), config["training"], source)
    return config


def _older_replay_key(given: dict, training: dict, source: str) -> None:
    """Read ``training.replay``, the older spelling of ``training.compile`` (from when recorded steps were part of
    the core and on by default, so every old checkpoint's run file has it): true is ``"auto"`` (the installed step
    compiler, if any: the speed-up it always was), false ``"none"``. ``given``: the run file's own table."""
    if "replay" not in given:
        return
    if "compile" in given:
        raise ConfigError(f"{source}: training.replay is the older spelling of training.compile; give only compile")
    training["compile"] = "auto" if training.pop("replay") else "none"


def _check(key: str, value, rule, source: str):
    expected = dict if isinstance(rule, dict) else rule
    if isinstance(expected, type) and (not isinstance(value, expected) or expected is int and isinstance(value, bool)):
        name = "a table" if expected is dict else expected.__name__
        raise ConfigError(f"{source}: {key} must be {name}, got {value!r}")
    if isinstance(rule, tuple) and value not in rule:
        raise ConfigError(f"{source}: {key} must be one of {', '.join(rule)}, got {value!r}")
    for sub, subvalue in value.items() if isinstance(rule, dict) else ():
        if sub not in rule:
            raise ConfigError(f"{source}: unknown key {key}.{sub} (allowed: {', '.join(rule)})")
        _check(f"{key}.{sub}", subvalue, rule[sub], source)
    if key in MINIMUMS and value < MINIMUMS[key]:
        raise ConfigError(f"{source}: {key} must be at least {MINIMUMS[key]}, got {value}")

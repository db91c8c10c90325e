"""Run files: one TOML file describes a whole run.

::

    name = "digits"
    seed = 0

    [handler]                 # or SIGMA_HANDLER / --handler
    name = "auto"
    dtype = "float32"

    [data]                    # see sigma_core.data.config
    source = "sklearn"
    name = "digits"

    [split]                   # held-out records: a fraction, or [start, stop) ranges
    validation = 0.2

    [[network.layers]]
    type = "input"
    shape = [64]
    ...

    [initialisers]
    "*.weights" = { type = "gaussian", std = 0.1 }

    [optimiser]
    type = "adagrad"
    learning_rate = 0.02

    [training]
    batch_size = 32
    epochs = 10

    [[hooks]]                 # optional; see sigma_core.hooks.config
    type = "accuracy_reporter"
    tops = [1, 3]

    [checkpoint]              # optional: save to resume with sigma train --resume
    directory = "checkpoints"
    every_iterations = 100    # and/or every_epochs = 1
    keep = 3                  # the newest 3

Every key is checked against this schema, so a typo is an error that names
the key. ``--set training.epochs=3`` overrides any key; the value is read as a
TOML value (``3``, ``0.5``, ``"adam"``, ``[1, 2]``) and otherwise as a string.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

from .errors import ConfigError

#: section -> allowed keys (None: free-form, validated by the component that reads it)
SCHEMA = {
    "name": str,
    "seed": int,
    "handler": {"name": str, "dtype": ("float32", "float64")},  # a tuple: the allowed values
    "data": None,
    "split": {"validation": None, "train": None, "shuffle": bool, "seed": int},
    "network": {"layers": list},
    "initialisers": None,
    "optimiser": None,
    "training": {"batch_size": int, "epochs": int, "last_batch": ("keep", "drop"), "shuffle": bool, "validation_batch_size": int, "prefetch": int},
    "checkpoint": {"directory": str, "every_iterations": int, "every_epochs": int, "keep": int},
    "hooks": list,  # [[hooks]] tables, validated by sigma_core.hooks.config
    "monitors": list,  # [[monitors]] tables: { type = "metrics", ... }, see sigma_core.monitors
    "operator": None,  # { type = "single_worker", ... }: who runs the trainer, see sigma_core.operators
}

#: lower bounds of numeric settings, checked after defaults are filled in
MINIMUMS = {
    "seed": 0,
    "split.seed": 0,
    "checkpoint.every_iterations": 0,
    "checkpoint.every_epochs": 0,
    "checkpoint.keep": 1,
    "training.epochs": 1,
    "training.batch_size": 1,
    "training.validation_batch_size": 1,
    "training.prefetch": 0,
}

DEFAULTS = {
    "name": "run",
    "seed": 0,
    "handler": {"name": "auto", "dtype": "float32"},
    "split": {"validation": 0.2, "shuffle": True},
    "initialisers": {},
    "optimiser": {"type": "sgd", "learning_rate": 0.1},
    "training": {"batch_size": 32, "epochs": 10, "last_batch": "keep", "shuffle": True, "validation_batch_size": 1000, "prefetch": 2},
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
    """Apply ``"a.b.c=value"`` to a nested dict in place."""
    key, sep, value = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    parts = key.split(".")
    node = config
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parts[:depth + 1])} is not a table")
        node = child
    node[parts[-1]] = parse_value(value.strip())


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
    for key, value in raw.items():
        if isinstance(config.get(key), dict) and isinstance(value, dict) and key not in ("initialisers", "optimiser"):
            config[key].update(value)
        else:
            config[key] = value
    for key, least in MINIMUMS.items():
        *section, name = key.split(".")
        table = config.get(section[0], {}) if section else config
        if name in table and table[name] < least:
            raise ConfigError(f"{source}: {key} must be at least {least}, got {table[name]}")
    return config


def _check(key: str, value, rule, source: str):
    if rule is None:
        if key in ("data", "optimiser", "initialisers", "operator") and not isinstance(value, dict):
            raise ConfigError(f"{source}: {key} must be a table")
        return
    if isinstance(rule, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key} must be a table")
        for sub, subvalue in value.items():
            if sub not in rule:
                raise ConfigError(f"{source}: unknown key {key}.{sub} (allowed: {', '.join(rule)})")
            _check(f"{key}.{sub}", subvalue, rule[sub], source)
        return
    if isinstance(rule, tuple):
        if value not in rule:
            raise ConfigError(f"{source}: {key} must be one of {', '.join(rule)}, got {value!r}")
        return
    if rule is int and isinstance(value, bool) or not isinstance(value, rule):
        raise ConfigError(f"{source}: {key} must be {rule.__name__}, got {value!r}")

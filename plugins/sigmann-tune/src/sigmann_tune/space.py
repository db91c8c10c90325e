"""A run file's ``[tune]`` section: the settings of a study and the search space, checked before any trial starts.

::

    [tune]
    objective = "validation.accuracy"   # a run value read after each epoch (default); "validation.cost", "cost", ...
    direction = "maximize"              # default: maximize an accuracy, minimize anything else
    trials = 20                         # trials that finish (complete, pruned or failed by an error)
    timeout = 600                       # seconds: start no trial after this (optional)
    sampler = "tpe"                     # tpe (default), random, grid
    pruner = "median"                   # median (default), hyperband, none
    "optimiser.learning_rate" = { log_uniform = [1e-4, 1e-1] }
    "network.layers[1].size" = { choice = [64, 128, 256] }
    "training.batch_size" = { int = [16, 128], step = 16 }
    "network.layers[2].p" = { uniform = [0.0, 0.5] }

Settings are plain values; every table is a search dimension, keyed like ``sigma train --set``
(``network.layers.1.size`` and ``network.layers[1].size`` are the same key). A dimension's key must name a
value the run file has (or a default it gets), and every end of its range must make a run file that
passes the same checks ``sigma train`` makes of the network and the optimiser: a bad key, an empty range
or a value the layer refuses is one line naming the dimension, before anything trains.

The core holds the section's settings against :data:`sigmann_tune.SECTION` (``register_sections``);
:func:`read_section` checks the dimensions. Nothing here imports Optuna: ``sigma train`` reads run files
that have a ``[tune]`` section too.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass

from sigma_core import ConfigError, Network, apply_override, build, from_layer_list, require, validate_run

from . import SECTION

SETTINGS = [key for key in SECTION if key is not ...]
#: One dimension: exactly one of the kinds, and the options its kind takes.
KINDS = {"log_uniform": (), "uniform": ("step",), "int": ("step", "log"), "choice": ()}
DIMENSION = {"log_uniform": "interval", "uniform": "interval", "int": "interval", "choice": "array",
             "step": "number > 0", "log": "bool"}


@dataclass(frozen=True)
class Dimension:
    """One searched key: ``kind`` (one of :data:`KINDS`) over ``low``..``high`` or ``choices``."""

    key: str  # as the run file writes it: Optuna's parameter name
    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple = ()
    step: float | None = None
    log: bool = False

    @property
    def path(self) -> str:
        """The key as ``--set`` takes it: ``network.layers[1].size`` -> ``network.layers.1.size``."""
        return re.sub(r"\[(\d+)\]", r".\1", self.key)

    def ends(self) -> list:
        """The values a range cannot go beyond, each checked before a trial starts."""
        return list(self.choices) if self.kind == "choice" else [self.low, self.high]

    def grid(self) -> list | None:
        """Every value the dimension takes, for the grid sampler; None for a continuous range."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind == "int" and not self.log:
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        return None

    def distribution(self):
        """The Optuna distribution of this dimension."""
        import optuna

        if self.kind == "choice":
            return optuna.distributions.CategoricalDistribution(self.choices)
        if self.kind == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log,
                                                        step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.kind == "log_uniform",
                                                      step=self.step)


@dataclass(frozen=True)
class Section:
    """A checked ``[tune]`` section: the settings (defaults filled in) and the dimensions in file order."""

    dimensions: tuple[Dimension, ...]
    objective: str = "validation.accuracy"
    direction: str = ""  # filled in from the objective
    trials: int = 20
    timeout: float | None = None
    sampler: str = "tpe"
    seed: int = 0
    pruner: str = "median"
    startup_trials: int = 2
    warmup_epochs: int = 0
    heartbeat: int = 10
    epochs: int = 1  # the run's training.epochs: the pruners' largest step

    def distributions(self) -> dict:
        return {dimension.key: dimension.distribution() for dimension in self.dimensions}


def read_section(raw: dict, source: str) -> Section:
    """The checked ``[tune]`` section of ``raw`` (a run file's tables, ``--set`` applied), or a one-line
    :class:`ConfigError` naming ``source`` and the culprit."""
    table = raw.get("tune")
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: no [tune] section; add one that names what to search, e.g. "
                          '"optimiser.learning_rate" = { log_uniform = [1e-4, 1e-1] }')
    config = validate_run(raw, source=source)  # the run itself, and the settings against SECTION
    settings = {key: value for key, value in table.items() if key in SETTINGS}
    dimensions = []
    for key, value in table.items():
        if key in SETTINGS:
            continue
        where = f"{source}: tune.{json.dumps(key)}"
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: unknown key tune.{key}; settings are {', '.join(SETTINGS)}, and a search "
                              'dimension is a table, e.g. "optimiser.learning_rate" = { log_uniform = [1e-4, 1e-1] }')
        dimensions.append(_dimension(key, value, where))
        _check_key(dimensions[-1], raw, config, where)
    if not dimensions:
        raise ConfigError(f"{source}: [tune] names nothing to search; add a dimension, e.g. "
                          '"optimiser.learning_rate" = { log_uniform = [1e-4, 1e-1] }')
    objective = settings.get("objective", "validation.accuracy")
    if not re.fullmatch(r"cost|validation\.\w+", objective):
        raise ConfigError(f"{source}: tune.objective: expected a value each epoch reports (validation.accuracy, "
                          f"validation.cost, cost, validation.<score>), got {objective!r}")
    direction = settings.pop("direction", None) or ("maximize" if objective.endswith("accuracy") else "minimize")
    section = Section(tuple(dimensions), **{**settings, "direction": direction}, epochs=config["training"]["epochs"])
    if section.sampler == "grid":
        continuous = [dimension.key for dimension in dimensions if dimension.grid() is None]
        if continuous:
            raise ConfigError(f"{source}: tune.sampler = \"grid\" searches choices and int ranges only; "
                              f"tune.{json.dumps(continuous[0])} is a continuous range")
    return section


def grid(section: Section) -> dict:
    """The grid sampler's search space: each key's values."""
    return {dimension.key: dimension.grid() for dimension in section.dimensions}


def _dimension(key: str, table: dict, where: str) -> Dimension:
    require(where, DIMENSION, table)
    kinds = [kind for kind in KINDS if kind in table]
    if len(kinds) != 1:
        raise ConfigError(f"{where}: give exactly one of {', '.join(KINDS)}, got {', '.join(kinds) or 'none'}")
    kind = kinds[0]
    extra = [option for option in table if option not in (kind, *KINDS[kind])]
    if extra:
        raise ConfigError(f"{where}: {kind} takes no {extra[0]!r}" + (f"; it takes {', '.join(KINDS[kind])}"
                                                                     if KINDS[kind] else ""))
    if kind == "choice":
        choices = table["choice"]
        if not choices:
            raise ConfigError(f"{where}: choice is empty; list at least one value")
        for choice in choices:
            finite = not isinstance(choice, float) or math.isfinite(choice)
            if not isinstance(choice, (str, int, float, bool)) or not finite:
                raise ConfigError(f"{where}: choice values are strings, numbers or booleans, got {choice!r}")
        if len(set(map(repr, choices))) != len(choices):
            raise ConfigError(f"{where}: choice lists a value twice")
        return Dimension(key, kind, choices=tuple(choices))
    low, high = table[kind]
    if low > high:
        raise ConfigError(f"{where}: the range {kind} = [{low}, {high}] is empty (low > high)")
    if kind == "log_uniform" and low <= 0:
        raise ConfigError(f"{where}: log_uniform needs a range of positive numbers, got [{low}, {high}]")
    if kind == "int":
        for bound in (low, high, *([table["step"]] if "step" in table else [])):
            if not float(bound).is_integer():
                raise ConfigError(f"{where}: int ranges and steps are whole numbers, got {bound!r}")
        if table.get("log") and (low < 1 or "step" in table):
            raise ConfigError(f"{where}: a log int range needs low >= 1 and no step")
    return Dimension(key, kind, float(low) if kind != "int" else int(low), float(high) if kind != "int" else int(high),
                     step=table.get("step"), log=table.get("log", False))


def _check_key(dimension: Dimension, raw: dict, config: dict, where: str) -> None:
    """Refuse a key the run file does not have, and any end of the range the run's network or optimiser refuses."""
    node = config
    for part in dimension.path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise ConfigError(f"{where}: the run file has no {dimension.path} (search a key it sets, as "
                              "--set addresses it; give the key a value in the run file first)")
    for value in dimension.ends():
        trial = apply(raw, {dimension: value})
        try:
            checked = validate_run(trial, source="")
            Network(from_layer_list(checked["network"]["layers"]))
            build("optimiser", checked["optimiser"])
        except ConfigError as error:
            raise ConfigError(f"{where}: {value!r} is refused: {str(error).removeprefix(': ')}") from None


def apply(raw: dict, values: dict) -> dict:
    """A copy of ``raw`` without its ``[tune]`` section and with ``{Dimension or key: value}`` set as ``--set``
    would set them."""
    raw = copy.deepcopy({key: value for key, value in raw.items() if key != "tune"})
    for dimension, value in values.items():
        path = dimension.path if isinstance(dimension, Dimension) else re.sub(r"\[(\d+)\]", r".\1", dimension)
        apply_override(raw, f"{path}={literal(value)}")
    return raw


def literal(value) -> str:
    """``value`` (a string, number or boolean) as a TOML value, which ``--set`` reads back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    return repr(value)

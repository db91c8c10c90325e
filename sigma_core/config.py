"""The one validator: run files, component arguments and checkpoint metadata are held against *rules*.

A bad value is then one line naming its key (``run.toml: training.epochs: expected an integer >= 1, got 0``),
not a traceback from deep inside. A rule is

- a string: a type of :data:`TYPES` (``"int"``, ``"number"``, ``"shape"``, ...), optionally followed by a range
  (``>= a``, ``> a``, ``<= a``, ``< a`` or ``in [a, b)``, either bracket at either end) and by ``or null``;
- a tuple: one of its values (``("keep", "drop")``);
- a list of one rule: an array whose every item follows it;
- a dict: a table whose keys follow their rules; the key ``...`` gives the rule of any key it does not list.
"""

import copy
import logging
import inspect
import math
import operator
import re
import tomllib
from numbers import Integral, Real

from sigma_core.errors import ConfigError
from sigma_core.reading import check_readable

#: A string rule's type -> (what a message calls it, whether a value is of it).
TYPES = {
    "int": ("an integer", lambda v: isinstance(v, Integral) and not isinstance(v, bool)),
    "number": ("a finite number", lambda v: isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)),
    "real": ("a number", lambda v: isinstance(v, Real) and not isinstance(v, bool)),  # NaN too
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "filename": ("a name usable as a file name (not empty, not . or .., no / or \\ or control characters)",
                 lambda v: isinstance(v, str) and v not in ("", ".", "..") and not re.search(r"[/\\\x00-\x1f\x7f]", v)),
    "path": ("a path (a string without control characters)",
             lambda v: isinstance(v, str) and v != "" and not re.search(r"[\x00-\x1f\x7f]", v)),
    "table": ("a table", lambda v: isinstance(v, dict)),
    "array": ("an array", lambda v: isinstance(v, list)),
    "any": ("anything", lambda v: True),
    "shape": ("a positive integer or an array of them",
              lambda v: accepts("int >= 1", v)
              or isinstance(v, (list, tuple)) and len(v) > 0 and all(accepts("int >= 1", n) for n in v)),
    "names": ("a string or an array of strings",
              lambda v: isinstance(v, str) or isinstance(v, (list, tuple)) and all(isinstance(n, str) for n in v)),
    "interval": ("[min, max], two finite numbers",
                 lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(accepts("number", n) for n in v)),
    # a CSV file's columns: 3, "0-3", "0-3,6" or an array of them (sigma_core.data.csv_extractor)
    "columns": ("a column index, a range \"first-last\" or an array of them",
                lambda v: accepts("int", v) or isinstance(v, str)
                or isinstance(v, list) and len(v) > 0 and all(accepts("int", n) or isinstance(n, str) for n in v)),
    # a CSV column's value mapping: values in order (each maps to its position), or value -> number
    "mapping": ("an array of values or a table of value -> number",
                lambda v: isinstance(v, list) and all(isinstance(n, (str, Real)) and not isinstance(n, bool) for n in v)
                or isinstance(v, dict) and all(accepts("number", n) for n in v.values())),
}
_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def accepts(rule: str, value) -> bool:
    """Whether ``value`` follows the string ``rule``."""
    if rule.endswith(" or null") and value is None:
        return True
    kind, _, bounds = rule.removesuffix(" or null").partition(" ")
    if not TYPES[kind][1](value):
        return False
    if not bounds:
        return True
    interval = re.fullmatch(r"in ([\[(])(.+), (.+)([\])])", bounds)
    if interval:
        low_bracket, low, high, high_bracket = interval.groups()
        return (_COMPARE[">=" if low_bracket == "[" else ">"](value, float(low))
                and _COMPARE["<=" if high_bracket == "]" else "<"](value, float(high)))
    comparison, limit = bounds.split()
    return _COMPARE[comparison](value, float(limit))


def describe_rule(rule: str) -> str:
    """What the string ``rule`` accepts, in words: ``"an integer >= 1"``, ``"a table or null"``."""
    kind, _, bounds = rule.partition(" ")
    return f"{TYPES[kind][0]}{' ' * bool(bounds)}{bounds}"


def require(key: str, rule, value, *, complete: bool = False) -> None:
    """Raise :class:`ConfigError` naming ``key`` (or the key inside it) unless ``value`` follows ``rule``.

    A table rule's keys are optional and no others are allowed (a run file's: a key it does not list is a typo)
    unless ``complete``: then each must be there and others are let be (a checkpoint's metadata, which Sigma
    writes whole and a later version may add to).
    """
    if isinstance(rule, str):
        if not accepts(rule, value):
            raise ConfigError(f"{key}: expected {describe_rule(rule)}, got {value!r}")
    elif isinstance(rule, tuple):
        if value not in rule:
            raise ConfigError(f"{key}: expected one of {', '.join(map(str, rule))}, got {value!r}")
    elif isinstance(rule, list):
        require(key, "array", value)
        for index, item in enumerate(value):
            require(f"{key}[{index}]", rule[0], item, complete=complete)
    else:
        require(key, "table", value)
        inner = f"{key}." if key else ""
        for name, item in value.items():
            if name in rule or ... in rule:
                require(f"{inner}{name}", rule.get(name, rule.get(...)), item, complete=complete)
            elif not complete:
                raise ConfigError(f"unknown key {inner}{name}; allowed: {', '.join(rule)}")
        missing = [name for name in rule if name is not ... and name not in value] if complete else []
        if missing:
            raise ConfigError(f"{inner}{missing[0]} is missing")


#: Argument names with one meaning across components (rules follow PyTorch's checks).
CONVENTIONS = {
    "size": "int >= 1",
    "shape": "shape",
    "seed": "int >= 0",
    "freeze": "names",
    "learning_rate": "number >= 0",
    "weight_decay": "number >= 0",
    "momentum": "number >= 0",
    "eps": "number >= 0",
    "std": "number >= 0",
    "importance": "number >= 0",
    "gain": "number > 0",
    "mean": "number",
    "low": "number",
    "high": "number",
    "rho": "number in [0, 1]",
    "beta1": "number in [0, 1)",
    "beta2": "number in [0, 1)",
    "p": "number in [0, 1)",
}
#: Keys older run files give a kind of component that no component of it takes now, and what to do instead.
RETIRED = {
    "hook": {  # the first four: Sigma's declarative hooks (the sigmann-criteria distribution) still take them
        "on": "criteria gate sigmann-criteria's hooks; the checkpoint hook keeps the best epochs itself "
              "(best = \"validation.accuracy\", mode = \"max\")",
        "priority": "hooks run in the order they are listed",
        "background": "a hook decides itself whether it runs on its own thread",
        "target": "every hook runs once per event, on the run's state",
        "step": "a schedule's length is its period now",  # step_schedule's (staircase_schedule now)
        "steps": "a schedule's length is its period now",  # warm_up's
    },
    "layer": {"alias": "an input or output layer names its external array with external = \"...\" now"},
}
_ANNOTATIONS = {"int": "int", "float": "number", "bool": "bool", "str": "str"}


def check(where: str, component, arguments: dict, *, label: str, kind: str = "", skip: int = 0, given=(),
          shared=()) -> None:
    """Raise :class:`ConfigError` unless ``arguments`` suit the signature of ``component`` (a class or function).

    ``where`` is the table's key (``"network.layers[1]"``), ``label`` what it builds (``"optimiser 'adam'"``),
    ``kind`` its kind (for :data:`RETIRED` keys). The caller passes the first ``skip`` parameters and those in
    ``given`` itself; ``shared`` are keys it reads besides.
    """
    try:
        parameters = inspect.signature(component).parameters
    except (TypeError, ValueError):  # no introspectable signature: nothing to hold it against
        return
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    named = {key: p for key, p in list(parameters.items())[skip:]
             if key not in given and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    for key in arguments:
        if key not in named and not open_ended:
            if key in RETIRED.get(kind, {}):
                raise ConfigError(f"{where}.{key}: {label} does not take {key!r}: {RETIRED[kind][key]}")
            allowed = ", ".join([*shared, *named]) or "none"
            raise ConfigError(f"unknown key {where}.{key} for {label}; allowed: {allowed}")
    for key, parameter in named.items():
        if key not in arguments:
            if parameter.default is parameter.empty:
                raise ConfigError(f"{where}.{key} is required for {label}")
            continue
        value, rule = arguments[key], rule_of(component, key, parameter)
        if rule and not (value is None and parameter.default is None):
            require(f"{where}.{key}", rule, value)


def rule_of(component, name: str, parameter: inspect.Parameter):
    """The rule for one parameter of ``component``, or None: anything goes.

    The first of: the component's ``argument_rules`` (``{"size": "int >= 1"}``); :data:`CONVENTIONS`, unless an
    annotation says another type; its annotation (``int``, ``float``, ``bool`` or ``str``, maybe ``| None``);
    its default's type (an int default takes only integers).
    """
    declared = getattr(component, "argument_rules", {}).get(name)
    if declared:
        return declared
    annotation = parameter.annotation
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = {part.strip() for part in text.split("|")} - {"None"}
    typed = _ANNOTATIONS.get(parts.pop()) if len(parts) == 1 else None
    convention = CONVENTIONS.get(name)
    if convention and (typed == convention.partition(" ")[0] or annotation is parameter.empty):
        return convention
    return typed or {bool: "bool", int: "int", float: "number"}.get(type(parameter.default))


#: Every key a run file may have, and its rule (docs/gen/run_file.py says what each does, on the site). A
#: "table" is checked by what it builds: its extractor (data), its component (optimiser, operator).
SCHEMA = {
    "name": "filename",  # it names the run's checkpoints and lock file
    "seed": "int >= 0",
    "handler": {
        "name": "str",
        "dtype": ("float32", "float64"),
    },
    "data": "table",
    "split": {
        "validation": "any",
        "train": "any",
        "shuffle": "bool",
        "seed": "int >= 0",
    },
    "network": {
        "layers": "array",  # of tables, see architecture.from_layer_list
    },
    "initialisers": {...: "table"},  # pattern = { type = "gaussian", std = 0.1 }
    "optimiser": "table",
    "training": {
        "batch_size": "int >= 1",
        "epochs": "int >= 1",
        "last_batch": ("keep", "drop"),
        "shuffle": "bool",
        "validation_batch_size": "int >= 1",
        "prefetch": "int >= 0",
        "compile": "str",
        "replay": "bool",  # the older spelling of compile
    },
    "checkpoint": {
        "directory": "path",
        "every_iterations": "int >= 0",
        "every_epochs": "int >= 0",
        "keep": "int >= 1",
    },
    "hooks": ["table"],
    "monitors": ["table"],  # the older name for [[hooks]]
    "operator": "table",
}
DEFAULTS = {
    "name": "run",
    "seed": 0,
    "handler": {
        "name": "auto",
        "dtype": "float32",
    },
    "initialisers": {},
    "split": {
        "validation": 0.2,
        "shuffle": True,
    },
    "optimiser": {
        "type": "sgd",
        "learning_rate": 0.1,
    },
    "training": {
        "batch_size": 32,
        "epochs": 10,
        "last_batch": "keep",
        "shuffle": True,
        "validation_batch_size": 1000,
        "prefetch": 2,
        "compile": "auto",
    },
    "checkpoint": {
        "directory": "checkpoints",
        "every_iterations": 0,  # 0 and 0: no checkpoint during the run
        "every_epochs": 0,
        "keep": 3,
    },
    "hooks": [],
    "monitors": [],
    "operator": {},
}


def load(path, overrides=()) -> dict:
    """Read a run file, apply ``--set`` ``overrides`` (:func:`apply_override`) and :func:`validate` it."""
    path = check_readable(path, ConfigError, "run file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read run file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        byte = error.object[error.start]
        raise ConfigError(f"{path}: not UTF-8 text (byte {byte:#04x} at offset {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    for override in overrides:
        apply_override(raw, override)
    return validate(raw, source=str(path))


def parse_value(text: str):
    """A ``--set`` value as TOML (``3``, ``0.5``, ``"adam"``, ``[1, 2]``), else the raw string."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(config: dict, assignment: str) -> None:
    """Apply ``"a.b.c=value"`` to nested tables in place; a number is a list's index (``network.layers.1.size``)."""
    key, sep, value = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    if "" in parts:
        raise ConfigError(f"--set {key}: a key has an empty part; write dotted keys as a.b.c (network.layers.1.size)")
    node = config
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or key
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"--set {key}: {where} is a list of {len(node)}; "
                                  f"{part!r} is not an index 0..{len(node) - 1}")
            part = int(part)
        elif not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {where} is not a table or a list")
        if depth < len(parts) - 1:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    node[part] = parse_value(value.strip())


def validate(raw: dict, source: str = "config") -> dict:
    """Hold a run file's tables against :data:`SCHEMA` (and plugins' sections) and fill in :data:`DEFAULTS`."""
    schema = dict(SCHEMA)
    if set(raw) - set(SCHEMA):  # a plugin's section (register_sections) or a typo: discovery only then
        from sigma_core import plugins  # plugins imports this module

        sections = {component.name: component for component in plugins.components("section")}
        schema.update((key, sections[key].load()) for key in set(raw) - set(SCHEMA) if key in sections)
    try:
        require("", schema, raw)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    for required in ("data", "network"):
        if required not in raw:
            raise ConfigError(f"{source}: missing [{required}] section")
    if not raw["network"].get("layers"):
        raise ConfigError(f"{source}: network.layers is empty; list the layers with [[network.layers]]")
    config = copy.deepcopy(DEFAULTS)
    for key, value in raw.items():  # a table of listed keys keeps the defaults of those it leaves out
        listed = isinstance(schema[key], dict) and ... not in schema[key]
        config[key] = {**config.get(key, {}), **value} if listed else value
    if "replay" in raw.get("training", {}):  # compile's older spelling, in older checkpoints' run files
        if "compile" in raw["training"]:
            raise ConfigError(f"{source}: training.replay is the older spelling of training.compile; give only compile")
        config["training"]["compile"] = "auto" if config["training"].pop("replay") else "none"
    config["data"] = data_table(config["data"], source)
    return config


def data_table(table, source: str = "config"):
    """A ``[data]`` table with the extractor under ``extractor``: ``source``, its older name (``register_sources``
    registers URL fetchers, which a data ``path`` uses), is still read, with a one-line note."""
    if not isinstance(table, dict) or "source" not in table:
        return table
    if "extractor" in table:
        raise ConfigError(f"{source}: data.source is the older name of data.extractor; give only extractor")
    logging.getLogger("sigma").warning("%s: [data] source = %r is read as extractor = %r (its newer name)", source,
                                       table["source"], table["source"])
    return {("extractor" if key == "source" else key): value for key, value in table.items()}

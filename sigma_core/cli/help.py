"""``sigma help KIND NAME`` and ``sigma train --print-config``: what the components' own declarations say.

Both read a component's arguments from its signature, as the run file is
checked (:func:`sigma_core.config.check`, each argument's rule from
:func:`~sigma_core.config.rule_of`), so what they print is what a run file may
write, and no list of arguments is kept anywhere else to go stale.
``--print-config`` is the run file with every default filled in, in TOML, as
LightningCLI's ``--print_config`` prints its YAML: the run it would train,
ready to be saved and trained as it is.
"""

from __future__ import annotations

import copy
import inspect
import json
import re

from sigma_core import plugins
from sigma_core.config import SCHEMA, check, describe_rule, rule_of
from sigma_core.errors import UnknownComponentError

from . import options

#: Leading parameters a kind's builder passes itself, which are no run-file keys: a layer's name and input shapes,
#: an operator's trainer (see :func:`sigma_core.plugins.build`).
CONTEXT = {"layer": 2, "operator": 1}
#: Where a run file gives each kind's arguments, and the keys that table has besides them, the one naming the
#: component first (the data table's: :data:`sigma_core.data.sources.COMMON_KEYS`, read when needed).
TABLES = {"layer": ("[[network.layers]]", ("type", "name", "inputs")), "optimiser": ("[optimiser]", ("type",)),
          "initialiser": ("[initialisers] pattern = {...}", ("type",)), "operator": ("[operator]", ("type",)),
          "hook": ("[[hooks]], or --monitor NAME:key=value,...", ("type",)), "extractor": ("[data]", None)}
#: Other words for a kind: run files say [[monitors]] too.
KIND_ALIASES = {"monitor": "hook", "optimizer": "optimiser", "initializer": "initialiser"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "help", parents=[options.DEBUG], help="a component's arguments, types, defaults and documentation",
        description="Show a registered component's run-file arguments (types, defaults) and documentation, read "
                    "from its own declaration: sigma help layer dense, sigma help monitor metrics. Without NAME: "
                    "the components of KIND; without KIND: the kinds.")
    parser.add_argument("kind", nargs="?", help=f"one of {', '.join(plugins.KINDS)}")
    parser.add_argument("name", nargs="?", help="a registered name or alias (see sigma plugins)")
    parser.set_defaults(run=run_help)


def run_help(args) -> int:
    if args.kind is None:
        print("kinds: " + ", ".join(plugins.KINDS) + "\nsigma help KIND lists the components of a kind")
        return 0
    kind = KIND_ALIASES.get(args.kind, args.kind)
    if kind not in plugins.KINDS:
        raise UnknownComponentError(f"unknown kind {args.kind!r}; kinds are {', '.join(plugins.KINDS)}")
    if args.name is None:
        for component in plugins.components(kind):
            print(f"{component.name:24} {component.description}")
        return 0
    print(component_help(plugins.get(kind, args.name)))
    return 0


def component_help(component) -> str:
    """A component as ``sigma help`` shows it: where it comes from, its documentation and its arguments."""
    implementation, kind = component.load(), component.kind
    aliases = f" (aliases: {', '.join(component.aliases)})" if component.aliases else ""
    lines = [f"{kind} {component.name}{aliases}, from {component.distribution} {component.version}"]
    lines += [f"  {component.description}"] if component.description else []
    if kind == "command":  # its implementation adds it to the parser: the parser documents it
        return "\n".join([*lines, "", f"Its arguments: sigma {component.name} --help"])
    documentation = _documentation(implementation)
    lines += ["", documentation] if documentation else []
    heading = "Arguments"
    if kind == "section" and isinstance(implementation, dict):  # a plugin's run-file section: its rule, key by key
        heading, where, shared = "Keys", f"[{component.name}]", ()
        rows = [(str(key), _words(rule), "") for key, rule in implementation.items() if key is not ...]
    elif kind in TABLES:
        where, shared = TABLES[kind][0], _other_keys(kind)
        rows = [(name, _words(rule_of(implementation, name, parameter)),
                 "required" if parameter.default is parameter.empty else f"default {_default(parameter.default)}")
                for name, parameter in _parameters(implementation, kind).items()]
    else:  # a handler, an activation, a source...: named in a run file, never given arguments
        return "\n".join(lines)
    if rows:
        widths = [max(len(row[column]) for row in rows) for column in (0, 1)]
        lines += ["", f"{heading} ({where}):"]
        lines += [f"  {name:{widths[0]}}  {rule:{widths[1]}}  {default}".rstrip() for name, rule, default in rows]
    return "\n".join([*lines, "", f"The table's other keys: {', '.join(shared)}."] if shared else lines)


def _other_keys(kind: str) -> tuple:
    """The keys of a ``kind`` component's table that are not its arguments, the one naming it first."""
    if TABLES[kind][1] is None:
        from sigma_core.data.sources import COMMON_KEYS  # imports NumPy: only when asked

        return COMMON_KEYS
    return TABLES[kind][1]


def _documentation(implementation) -> str:
    """The docstring the implementation itself has (a class's, then its ``__init__``'s), not one it inherits."""
    if inspect.isfunction(implementation):
        return inspect.cleandoc(implementation.__doc__ or "")
    owner = implementation if inspect.isclass(implementation) else type(implementation)  # an instance: its class's
    if owner.__module__ == "builtins":  # a section's rule (a dict): its description says what it is
        return ""
    init = owner.__dict__.get("__init__")
    texts = [owner.__dict__.get("__doc__"), init.__doc__ if init else None]
    return "\n\n".join(inspect.cleandoc(text) for text in texts if text)


def _parameters(implementation, kind: str) -> dict:
    """The run-file arguments of ``implementation``: its signature's named parameters after the builder's own."""
    try:
        parameters = inspect.signature(implementation).parameters
    except (TypeError, ValueError):  # an instance (an activation, an op) or a built-in: no arguments to give
        return {}
    return {name: p for name, p in list(parameters.items())[CONTEXT.get(kind, 0):]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _words(rule) -> str:
    """What a rule (:mod:`sigma_core.config`) accepts, in words."""
    if isinstance(rule, str):
        return describe_rule(rule)
    if isinstance(rule, tuple):
        return "one of " + ", ".join(map(_default, rule))
    if isinstance(rule, list):
        return f"an array, each {_words(rule[0])}"
    return "anything" if rule is None else "a table"


def _default(value) -> str:
    return "unset" if value is None else toml_value(value) if _plain(value) else repr(value)


# --- --print-config -----------------------------------------------------------------------------------------------

def resolved_config(config: dict) -> dict:
    """The validated run file ``config`` with every component's defaults filled in, its arguments checked.

    Components are those of ``[[network.layers]]``, ``[optimiser]``, ``[initialisers]``,
    ``[[hooks]]``/``[[monitors]]``, ``[operator]`` (``single_worker`` unless given) and ``[data]``'s ``source``.
    A table the run would refuse is refused here, in the same words.
    """
    config = copy.deepcopy(config)
    config["network"]["layers"] = [_completed("layer", table, f"network.layers[{index}]")
                                   for index, table in enumerate(config["network"]["layers"])]
    config["optimiser"] = _completed("optimiser", config["optimiser"], "optimiser")
    config["initialisers"] = {pattern: _completed("initialiser", table, f'initialisers."{pattern}"')
                              for pattern, table in config["initialisers"].items()}
    for section in ("hooks", "monitors"):
        config[section] = [_completed("hook", table, f"{section}[{index}]")
                           for index, table in enumerate(config[section])]
    config["operator"] = _completed("operator", {"type": "single_worker", **config["operator"]}, "operator")
    config["data"] = _completed("extractor", config["data"], "data")
    return {**{key: config[key] for key in SCHEMA if key in config}, **config}  # in the order run files have


def _completed(kind: str, table, where: str):
    """``table`` with the defaults of the component it names that it leaves out."""
    others = _other_keys(kind)
    key = others[0]  # "type", or the data table's "source"
    if not isinstance(table, dict) or not isinstance(table.get(key), str):
        return table  # refused, in its own words, where it is built
    try:
        implementation = plugins.get(kind, table[key]).load()
    except UnknownComponentError as error:
        raise UnknownComponentError(f"{where}.{key}: {error}") from None
    arguments = {name: value for name, value in table.items() if name not in others}
    check(where, implementation, arguments, label=f"{kind} {table[key]!r}", kind=kind, skip=CONTEXT.get(kind, 0),
          shared=others)
    defaults = {name: list(p.default) if isinstance(p.default, tuple) else p.default
                for name, p in _parameters(implementation, kind).items() if p.default is not p.empty}
    return {**table, **{name: value for name, value in defaults.items() if name not in table}}


def config_toml(table: dict, path: tuple = ()) -> str:
    """``table`` as TOML: its values, then each table (``[a.b]``) and array of tables (``[[a.b]]``) in it.

    TOML has no null: an unset value (None) is a comment after the values, as is a default that has no TOML form.
    """
    values, comments, tables = [], [], []
    for key, value in table.items():
        header = ".".join(map(_key, (*path, key)))
        if isinstance(value, dict):
            body = config_toml(value, (*path, key))
            tables.append(body if body.startswith("[") else f"[{header}]\n{body}".rstrip("\n"))
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            tables += [f"[[{header}]]\n{config_toml(item, (*path, key))}".rstrip("\n") for item in value]
        elif _plain(value):
            values.append(f"{_key(key)} = {toml_value(value)}")
        else:
            comments.append(f"# {_key(key)}: {_default(value)}")
    return "\n\n".join(part for part in ("\n".join(values + comments), *tables) if part) + "\n" * (not path)


def toml_value(value) -> str:
    """One TOML value: a string, number, boolean, array or inline table (None left out of those)."""
    if isinstance(value, str):  # JSON's escapes are TOML's, but for DEL, which TOML wants escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # inf, nan and 1e-08 are TOML's spellings too
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{_key(key)} = {toml_value(item)}" for key, item in value.items() if item is not None) + "}"


def _plain(value) -> bool:
    """Whether ``value`` has a TOML form."""
    if isinstance(value, (list, tuple)):
        return all(map(_plain, value))
    if isinstance(value, dict):
        return all(isinstance(key, str) and (item is None or _plain(item)) for key, item in value.items())
    return isinstance(value, (str, bool, int, float))


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_value(key)

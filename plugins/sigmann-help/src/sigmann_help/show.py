"""What ``sigma help`` prints: the kinds, a kind's components, or one component's origin, documentation and
run-file arguments (read as :func:`sigma_core.config.check` reads them, so what it shows is what a run file may
write)."""

from __future__ import annotations

import inspect
import json

from sigma_core import COMPONENT_KINDS, UnknownComponentError, components, describe_rule, get_component, rule_of
from sigmann_help.resolved import component_arguments, component_table_keys

from sigmann_help.markup import plain

#: Where a run file gives each kind's arguments.
TABLES = {"layer": "[[network.layers]]", "optimiser": "[optimiser]", "initialiser": "[initialisers] pattern = {...}",
          "operator": "[operator]", "hook": "[[hooks]], or --monitor NAME:key=value,...", "extractor": "[data]"}
#: Other words for a kind: run files say [[monitors]] too.
KIND_ALIASES = {"monitor": "hook", "optimizer": "optimiser", "initializer": "initialiser"}


def _named(name: str) -> list:
    """Every component called ``name`` (or aliased so), whatever its kind: ``sigma help adam`` should not need the
    user to know that Adam is an ``optimiser`` (``relu`` is an activation and a layer: both are shown)."""
    named = []
    for kind in COMPONENT_KINDS:
        try:
            named.append(get_component(kind, name))
        except UnknownComponentError:
            pass
    return named


def run(kind: str | None, name: str | None) -> int:
    """Print the kinds (no ``kind``), a kind's components (no ``name``), or one component; return the exit status."""
    if kind is None:
        print("kinds: " + ", ".join(COMPONENT_KINDS) + "\nsigma help KIND lists the components of a kind")
        return 0
    kind = KIND_ALIASES.get(kind, kind)
    if kind not in COMPONENT_KINDS:
        if name is None and (named := _named(kind)):
            print("\n\n".join(component_help(component) for component in named))
            return 0
        unknown = f"unknown kind {kind!r}" if name else f"no kind or component is named {kind!r}"
        raise UnknownComponentError(f"{unknown}; kinds are {', '.join(COMPONENT_KINDS)}")
    if name is None:
        for component in components(kind):
            print(f"{component.name:24} {plain(component.description)}")
    else:
        print(component_help(get_component(kind, name)))
    return 0


def component_help(component) -> str:
    """A component as ``sigma help`` shows it: where it comes from, its documentation and its arguments."""
    implementation, kind = component.load(), component.kind
    aliases = f" (aliases: {', '.join(component.aliases)})" if component.aliases else ""
    lines = [f"{kind} {component.name}{aliases}, from {component.distribution} {component.version}"]
    lines += [f"  {plain(component.description)}"] if component.description else []
    if kind == "command":  # its implementation adds it to the parser: the parser documents it
        return "\n".join([*lines, "", f"Its arguments: sigma {component.name} --help"])
    documentation = _documentation(implementation)
    lines += ["", documentation] if documentation else []
    heading, shared = "Arguments", ()
    if kind == "section" and isinstance(implementation, dict):  # a plugin's run-file section: its rule, key by key
        heading, where = "Keys", f"[{component.name}]"
        rows = [(str(key), rule_words(rule), "") for key, rule in implementation.items() if key is not ...]
    elif kind in TABLES:
        where, shared = TABLES[kind], component_table_keys(kind)
        rows = [(name, rule_words(rule_of(implementation, name, parameter)),
                 "required" if parameter.default is parameter.empty else f"default {toml_value(parameter.default)}")
                for name, parameter in component_arguments(implementation, kind).items()]
    else:  # a handler, an activation, a source...: named in a run file, never given arguments
        return "\n".join(lines)
    if rows:
        widths = [max(len(row[column]) for row in rows) for column in (0, 1)]
        lines += ["", f"{heading} ({where}):"]
        lines += [f"  {name:{widths[0]}}  {rule:{widths[1]}}  {default}".rstrip() for name, rule, default in rows]
    return "\n".join([*lines, "", f"The table's other keys: {', '.join(shared)}."] if shared else lines)


def _documentation(implementation) -> str:
    """The docstring the implementation itself has (a class's, then its ``__init__``'s), not one it inherits, as
    plain text."""
    if inspect.isfunction(implementation):
        return plain(inspect.cleandoc(implementation.__doc__ or ""))
    owner = implementation if inspect.isclass(implementation) else type(implementation)  # an instance: its class's
    if owner.__module__ == "builtins":  # a section's rule (a dict): its description says what it is
        return ""
    init = owner.__dict__.get("__init__")
    texts = [owner.__dict__.get("__doc__"), init.__doc__ if init else None]
    return plain("\n\n".join(inspect.cleandoc(text) for text in texts if text))


def rule_words(rule) -> str:
    """What a rule (:mod:`sigma_core.config`) accepts, in words."""
    if isinstance(rule, str):
        return describe_rule(rule)
    if isinstance(rule, tuple):
        return "one of " + ", ".join(map(toml_value, rule))
    if isinstance(rule, list):
        return f"an array, each {rule_words(rule[0])}"
    return "anything" if rule is None else "a table"


def toml_value(value) -> str:
    """A value as a run file writes it (JSON's spelling is TOML's for what defaults hold; inf and others: repr)."""
    if value is None:
        return "unset"
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)

"""Checking a component's arguments before it is built: one mechanism for every kind.

Every component is built from a table of keyword arguments. :func:`check` holds
it against the component's signature before anything is constructed or any data
is read, so a bad value is one line naming its key (``optimiser.learning_rate:
expected a finite number >= 0, got 'banana'``), not a traceback from deep inside.

A parameter's rule is the first of: the component's ``argument_rules`` class
attribute (``{"size": "int >= 1"}``); :data:`CONVENTIONS`, unless an annotation
says another type; its annotation (``int``, ``float``, ``bool`` or ``str``,
optionally ``| None``); its default's type (an int default takes only integers).
A rule is a type (``int``, ``number`` (finite), ``bool``, ``str``, ``shape``: a
positive integer or an array of them, ``names``: a string or an array of them),
optionally followed by a range: ``>= a``, ``> a``, ``<= a``, ``< a`` or ``in [a, b)``
with either bracket at either end.
"""

from __future__ import annotations

import inspect
import math
import operator
import re
from numbers import Integral, Real

from .errors import ConfigError

#: Argument names with one meaning across components (rules follow PyTorch's checks).
CONVENTIONS = {
    "size": "int >= 1", "shape": "shape", "seed": "int >= 0", "freeze": "names",
    "learning_rate": "number >= 0", "weight_decay": "number >= 0", "momentum": "number >= 0", "eps": "number >= 0",
    "std": "number >= 0", "importance": "number >= 0", "gain": "number > 0", "mean": "number", "low": "number",
    "high": "number", "rho": "number in [0, 1]", "beta1": "number in [0, 1)", "beta2": "number in [0, 1)",
    "p": "number in [0, 1)",
}

_TYPES = {
    "int": ("an integer", lambda v: isinstance(v, Integral) and not isinstance(v, bool)),
    "number": ("a finite number", lambda v: isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "shape": ("a positive integer or an array of them",
              lambda v: accepts("int >= 1", v)
              or isinstance(v, (list, tuple)) and len(v) > 0 and all(accepts("int >= 1", n) for n in v)),
    "names": ("a string or an array of strings",
              lambda v: isinstance(v, str) or isinstance(v, (list, tuple)) and all(isinstance(n, str) for n in v)),
}
_ANNOTATIONS = {"int": "int", "float": "number", "bool": "bool", "str": "str"}
_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def check(where: str, target, arguments: dict, *, label: str, skip: int = 0, given=(), shared=()) -> None:
    """Raise :class:`ConfigError` unless ``arguments`` suit ``target``'s signature.

    ``where`` is the table's key path (``"network.layers[1]"``), ``label`` what it
    builds (``"optimiser 'adam'"``). The caller passes the first ``skip``
    parameters and those in ``given`` itself; ``shared`` are keys it reads besides.
    """
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # no introspectable signature: nothing to hold it against
        return
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    named = {key: p for key, p in list(parameters.items())[skip:]
             if key not in given and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    for key in arguments:
        if key not in named and not open_ended:
            raise ConfigError(f"unknown key {where}.{key} for {label}; allowed: {', '.join([*shared, *named]) or 'none'}")
    for key, parameter in named.items():
        if key not in arguments:
            if parameter.default is parameter.empty:
                raise ConfigError(f"{where}.{key} is required for {label}")
            continue
        value, rule = arguments[key], rule_of(target, key, parameter)
        if rule and not (value is None and parameter.default is None):
            require(f"{where}.{key}", rule, value)


def require(key: str, rule: str, value) -> None:
    """Raise :class:`ConfigError` naming ``key`` unless ``value`` follows ``rule``."""
    if not accepts(rule, value):
        kind, _, bounds = rule.partition(" ")
        raise ConfigError(f"{key}: expected {_TYPES[kind][0]}{' ' * bool(bounds)}{bounds}, got {value!r}")


def rule_of(target, name: str, parameter: inspect.Parameter) -> str | None:
    """The rule for one parameter (see the module docstring), or None: anything goes."""
    declared = getattr(target, "argument_rules", {}).get(name)
    if declared:
        return declared
    annotation = parameter.annotation
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = {part.strip() for part in text.split("|")} - {"None"}
    typed = _ANNOTATIONS.get(parts.pop()) if len(parts) == 1 else None
    convention = CONVENTIONS.get(name)
    if convention and (typed == convention.partition(" ")[0] or annotation is parameter.empty):
        return convention
    default = parameter.default
    return typed or ("bool" if isinstance(default, bool) else "int" if isinstance(default, int)
                     else "number" if isinstance(default, float) else None)


def accepts(rule: str, value) -> bool:
    """Whether ``value`` follows ``rule`` (see the module docstring)."""
    kind, _, bounds = rule.partition(" ")
    if not _TYPES[kind][1](value):
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

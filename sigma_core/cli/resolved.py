"""A run file with every component's defaults filled in: what ``sigma config`` (``sigma train --print-config``,
sigmann-help) prints as TOML (LightningCLI's ``--print_config``, for run files: the run it would train, ready to be
saved and trained) and sigmann-mlflow logs.

A component's arguments are read from its signature, as the run file is checked (:func:`sigma_core.config.check`), so no
list of them is kept anywhere to go stale; ``sigma help`` (sigmann-help) reads them here too.
"""

import copy
import inspect

from sigma_core import plugins
from sigma_core.config import SCHEMA, check
from sigma_core.errors import UnknownComponentError

#: Leading parameters a kind's builder passes itself, which are no run-file keys: a layer's name and input shapes,
#: an operator's trainer (see :func:`sigma_core.plugins.build`).
CONTEXT = {"layer": 2, "operator": 1}
#: The keys of a kind's table besides its component's arguments, the one naming the component first.
TABLE_KEYS = {"layer": ("type", "name", "inputs"), "optimiser": ("type",), "initialiser": ("type",),
              "operator": ("type",), "hook": ("type",)}


def component_table_keys(kind: str) -> tuple:
    """:data:`TABLE_KEYS` of ``kind``; the data table's (extractor) are :data:`sigma_core.data.sources.COMMON_KEYS`."""
    if kind == "extractor":
        from sigma_core.data.sources import COMMON_KEYS  # imports NumPy: only when asked

        return COMMON_KEYS
    return TABLE_KEYS[kind]


def component_arguments(implementation, kind: str) -> dict[str, inspect.Parameter]:
    """The run-file arguments of ``implementation``: its signature's named parameters after the builder's own."""
    try:
        parameters = inspect.signature(implementation).parameters
    except (TypeError, ValueError):  # an instance (an activation, an op) or a built-in: no arguments to give
        return {}
    return {name: p for name, p in list(parameters.items())[CONTEXT.get(kind, 0):]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


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
    others = component_table_keys(kind)
    key = others[0]  # "type", or the data table's "extractor"
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
                for name, p in component_arguments(implementation, kind).items() if p.default is not p.empty}
    return {**table, **{name: value for name, value in defaults.items() if name not in table}}

"""The registered components of this process: which handlers, layers, ... exist.

The core (:mod:`sigma_core.builtins`) and every installed plugin register
components through the ``register_*`` functions of :mod:`sigma_core.hookspecs`.
Discovery runs once per process, on first use, and is cached (:func:`reset`
forgets it). Every ``sigma`` command pays for it, so plugins register lazy
``"module:attr"`` strings and ``check`` callables that only look for heavy dependencies. One
broken plugin must not take the others down: each loads on its own and a
failure is recorded (:func:`failures`).

``SIGMA_PLUGINS`` unset loads every entry point of the group ``"sigma"``; set,
it is a comma-separated allowlist of entry-point or distribution names (empty:
built-ins only). With ``SIGMA_STRICT_PLUGINS=1`` a plugin that fails to load
raises :class:`~sigma_core.errors.PluginError`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

import pluggy

from sigma_core import builtins, hookspecs
from sigma_core.config import check, require
from sigma_core.errors import (ComponentClashError, ComponentLoadError, ConfigError, PluginError, SigmaError,
                               UnknownComponentError, describe, one_line)

#: Component kinds: kind ``x`` is registered through the function ``register_xs``. The last,
#: "command", is a ``sigma`` subcommand: ``register_commands(cli)`` adds it to the argparse parser.
KINDS = ("handler", "layer", "activation", "optimiser", "initialiser", "hook", "extractor", "source", "cache",
         "reader", "exporter", "operator", "op", "compiler", "section", "command")

ENTRY_POINT_GROUP = "sigma"
CORE_DISTRIBUTION = "sigmann"

_log = logging.getLogger("sigma")


@dataclass(frozen=True)
class Component:
    """One registered component and where it came from.

    ``implementation`` is the class or function itself or a lazy ``"module:attr"`` string naming it: use
    :meth:`load`. An op's ``handler_kernels`` are ``(handler name, implementation)`` pairs: its faster versions per
    handler (:meth:`load_kernel`).
    """

    kind: str
    name: str
    implementation: Any
    distribution: str
    version: str
    aliases: tuple[str, ...] = ()
    rank: int = 0
    description: str = ""
    check: Callable[[], tuple[bool, str]] | None = None
    handler_kernels: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        # Validated here so that a malformed registration fails, and is reported, in the plugin that made it.
        for name in (self.name, *self.aliases, *[handler for handler, _ in self.handler_kernels]):
            if not isinstance(name, str) or not name:
                raise ValueError(f"{self.kind} names must be non-empty strings, got {name!r}")
        for implementation in (self.implementation, *[lazy for _, lazy in self.handler_kernels]):
            module, _, attribute = str(implementation).partition(":")
            if isinstance(implementation, str) and not (module and attribute):
                raise ValueError(f"{self.kind} {self.name!r}: a lazy implementation must look like "
                                 f"'package.module:attr', got {implementation!r}")
        if not isinstance(self.rank, int):
            raise TypeError(f"{self.kind} {self.name!r}: rank must be an int, got {self.rank!r}")
        if self.check is not None and not callable(self.check):
            raise TypeError(f"{self.kind} {self.name!r}: check must be callable or None")

    def load(self) -> Any:
        """The component, importing a lazy implementation now."""
        return self._import(self.implementation, f"{self.kind} {self.name!r}")

    def load_kernel(self, handler: str) -> Any:
        """An op's kernel for the handler named ``handler``, imported now; None if it registered none."""
        kernel = dict(self.handler_kernels).get(handler)
        return None if kernel is None else self._import(kernel, f"the {handler!r} kernel of {self.kind} {self.name!r}")

    def _import(self, implementation, what: str) -> Any:
        if not isinstance(implementation, str):
            return implementation
        module, _, attributes = implementation.partition(":")
        try:
            obj = importlib.import_module(module)
            for attribute in attributes.split("."):
                obj = getattr(obj, attribute)
        except Exception as exc:
            raise ComponentLoadError(f"{what} from {self.distribution} {self.version} "
                                     f"cannot be loaded from {implementation!r}: {describe(exc)}") from exc
        return obj

    def availability(self) -> tuple[bool, str]:
        """Whether the component can run here, and if not, why (one line)."""
        if self.check is None:
            return True, ""
        try:
            available, reason = self.check()
        except Exception as exc:
            return False, f"check failed: {describe(exc)}"
        return bool(available), one_line(reason)


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded; ``error`` is ``"Type: message"``."""

    name: str
    distribution: str
    version: str
    error: str


def components(kind: str | None = None) -> list[Component]:
    """Every registered component (of one kind), ordered by kind then name."""
    tables = _discovered().tables
    return [c for k in (KINDS if kind is None else (_checked_kind(kind),))
            for key, c in sorted(tables[k].items()) if key == c.name]  # aliases are keys too


def get(kind: str, name: str) -> Component:
    """The component registered as ``name`` (or with that alias) for ``kind``."""
    table = _discovered().tables[_checked_kind(kind)]
    if not isinstance(name, str):  # e.g. a run file's ``type = 3``
        raise UnknownComponentError(f"{kind} names are strings, not {name!r}")
    if name not in table:
        raise UnknownComponentError(_unknown_message(kind, name, table))
    return table[name]


def load(kind: str, name: str) -> Any:
    return get(kind, name).load()


def failures() -> list[PluginFailure]:
    """Plugins that failed to load in this process, in load order."""
    return list(_discovered().failures)


def load_seconds() -> dict[str, float]:
    """Seconds each plugin distribution took to load in this process: a slow one slows every command."""
    return dict(_discovered().load_seconds)


def reset() -> None:
    """Forget discovery, so the next call re-reads the environment and plugins."""
    global _cached
    with _lock:
        _cached = None
        importlib.invalidate_caches()


def build(kind: str, config: dict, *context, where: str | None = None, **context_keywords) -> Any:
    """Construct a registered component from ``{"type": name, **constructor arguments}``.

    Run files describe optimisers, initialisers, operators and hooks
    this way. ``context`` and ``context_keywords`` are what the caller supplies
    (an operator's trainer). Every argument is checked (:func:`sigma_core.config.check`)
    before the constructor runs, so a bad one is a :class:`ConfigError` naming
    its run-file key (``where``).
    """
    where = where or kind
    if not isinstance(config, dict) or "type" not in config:
        article = "an" if kind[:1] in "aeiou" else "a"
        raise ConfigError(f"{where}: {article} {kind} config needs a 'type' key, got {config!r}")
    arguments = dict(config)
    name = arguments.pop("type")
    require(f"{where}.type", "str", name)
    component = get(kind, name)
    available, reason = component.availability()
    if not available:
        raise ConfigError(f"{where}: {kind} {name!r} cannot run here: {reason}")
    cls = component.load()
    check(where, cls, arguments, label=f"{kind} {name!r}", kind=kind, skip=len(context), given=context_keywords)
    try:
        return cls(*context, **arguments, **context_keywords)
    except SigmaError:
        raise
    except (TypeError, ValueError) as error:  # a value no declared rule caught; --debug shows where it failed
        raise ConfigError(f"{where}: {kind} {name!r}: {error}") from error


# --- discovery ------------------------------------------------------------

_cached: _Discovery | None = None
_lock = threading.RLock()  # re-entrant, so a plugin that asks for components while loading cannot deadlock


class _Discovery:
    """Components by kind, keyed by name and alias, plus the plugins that failed."""

    def __init__(self):
        self.tables: dict[str, dict[str, Component]] = {kind: {} for kind in KINDS}
        self.failures: list[PluginFailure] = []
        self.load_seconds: dict[str, float] = {}  # distribution -> seconds its plugins took to import and register

    def add(self, found: list[Component]) -> None:
        for component in found:
            table, keys = self.tables[component.kind], dict.fromkeys((component.name, *component.aliases))
            for key in keys:
                if key in table:
                    raise ComponentClashError(
                        f"{component.kind} {key!r} is registered by both {table[key].distribution} and "
                        f"{component.distribution}; uninstall one, or leave one out with SIGMA_PLUGINS")
            table.update(dict.fromkeys(keys, component))


def _discovered() -> _Discovery:
    global _cached
    with _lock:
        if _cached is None:
            _cached = _discover()
        return _cached


def _discover() -> _Discovery:
    discovery = _Discovery()
    # The built-ins are the core: if they fail, that is a bug, shown with its traceback.
    discovery.add(_collect(builtins, CORE_DISTRIBUTION, _core_version()))
    strict = os.environ.get("SIGMA_STRICT_PLUGINS", "").strip().lower() in {"1", "true", "yes", "on"}
    for entry_point in _selected_entry_points():
        distribution, version = _distribution_of(entry_point)
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sys.stderr):  # a plugin's prints must not corrupt `sigma plugins --json`
                found = _collect(entry_point.load(), distribution, version)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # sys.exit() at import fails that plugin only, like any exception
            found, failure = [], PluginFailure(entry_point.name, distribution, version, describe(exc))
            message = f"plugin {failure.name!r} ({distribution} {version}) failed to load: {failure.error}"
            if strict:
                raise PluginError(message) from exc
            _log.warning("%s", message)
            discovery.failures.append(failure)
        seconds = time.perf_counter() - started
        discovery.load_seconds[distribution] = discovery.load_seconds.get(distribution, 0.0) + seconds
        _log.debug("plugin %r (%s %s) took %.3f s to load", entry_point.name, distribution, version, seconds)
        discovery.add(found)  # outside the try: a clash is not this plugin's failure alone
    return discovery


def _collect(plugin: object, distribution: str, version: str) -> list[Component]:
    """Run one plugin's ``register_*`` functions and return what it registered, committing nothing.

    Each plugin gets its own plugin manager, so every component is attributed to its distribution.
    """
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    if hasattr(plugin, "register_monitors"):  # monitors used to be a kind of their own
        raise PluginError("register_monitors is gone: monitors are hooks now; register them with register_hooks "
                          "(sigma_core.Hook)")
    manager.register(plugin)
    manager.check_pending()  # a misspelt register_* name is an error, not a no-op
    found: list[Component] = []

    def register(kind, name, implementation, *, aliases=(), check=None, rank=0, description="", kernels=None):
        aliases = (aliases,) if isinstance(aliases, str) else tuple(aliases)  # see hookspecs.Register
        if kernels is not None and (kind != "op" or not isinstance(kernels, dict)):
            raise TypeError(f"{kind} {name!r}: kernels (a dict of handler name -> implementation) are for ops only")
        found.append(Component(kind, name, implementation, distribution, version, aliases, rank, description, check,
                               tuple((kernels or {}).items())))

    for kind in KINDS[:-1]:  # all but "command", whose register_commands is handed the argparse parser
        getattr(manager.hook, f"register_{kind}s")(register=functools.partial(register, kind))
    if manager.hook.register_commands.get_hookimpls():
        found += _commands(manager.hook.register_commands, distribution, version)
    return found


def _commands(register_commands, distribution: str, version: str) -> list[Component]:
    """Run a plugin's ``register_commands`` on a scratch parser to learn which commands it adds.

    The implementation is ``register_commands`` itself: the CLI calls it again with the real parser.
    """
    import argparse

    scratch = argparse.ArgumentParser(prog="sigma").add_subparsers()
    register_commands(cli=scratch)
    helps = {action.dest: action.help or "" for action in scratch._get_subactions()}
    by_parser: dict[int, list[str]] = {}
    for name, parser in scratch.choices.items():  # an alias maps to its command's parser
        by_parser.setdefault(id(parser), []).append(name)
    return [Component("command", name, register_commands, distribution, version, tuple(aliases), description=helps.get(name, ""))
            for name, *aliases in by_parser.values()]


def _selected_entry_points() -> list[metadata.EntryPoint]:
    def names(entry_point) -> set[str]:
        return {_normalise(entry_point.name), _normalise(_distribution_of(entry_point)[0])}

    entry_points = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP),
                          key=lambda ep: (_distribution_of(ep)[0], ep.name))
    allowlist = os.environ.get("SIGMA_PLUGINS")
    if allowlist is None:
        return entry_points
    wanted = {_normalise(name) for name in allowlist.split(",") if name.strip()}
    chosen = [ep for ep in entry_points if names(ep) & wanted]
    unmatched = wanted - set().union(*map(names, chosen)) - {CORE_DISTRIBUTION}
    if unmatched:
        _log.warning("SIGMA_PLUGINS names %s, but no installed plugin matches", ", ".join(sorted(unmatched)))
    return chosen


def _normalise(name: str) -> str:
    """PEP 503 normalisation, so ``Sigmann_CPU`` matches ``sigmann-cpu``."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _distribution_of(entry_point: metadata.EntryPoint) -> tuple[str, str]:
    dist = entry_point.dist
    return ("unknown", "0+unknown") if dist is None else (dist.name, dist.version)


def _core_version() -> str:
    try:
        return metadata.version(CORE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _checked_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")
    return kind


def _unknown_message(kind: str, name: str, table: dict[str, Component]) -> str:
    import difflib  # only on the error path

    close = difflib.get_close_matches(name, table, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    available = ", ".join(sorted({c.name for c in table.values()})) or "none"
    # The core names no distribution: the README's list of distributions says which one provides what.
    return f"unknown {kind} {name!r} ({hint}available: {available}); the README lists the plugins that provide more"

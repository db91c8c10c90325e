"""The registered components of this process: which handlers, layers, ... exist.

The core (:mod:`sigma_core.builtins`) and every plugin (an entry point of the group ``"sigma"``) register
components through the ``register_*`` functions of :mod:`sigma_core.hookspecs`. Discovery runs once per
process, on first use (:func:`reset` forgets it); every ``sigma`` command pays for it, hence lazy
``"module:attr"`` targets and cheap ``check``s. Each plugin loads on its own: a broken one is recorded
(:func:`failures`), or with ``SIGMA_STRICT_PLUGINS=1`` raises :class:`~sigma_core.errors.PluginError`.
``SIGMA_PLUGINS``, if set, is a comma-separated allowlist of entry-point or distribution names (empty: built-ins
only).
"""

import argparse
import collections
import contextlib
import functools
import logging
import os
import pkgutil
import re
import sys
import threading
import time
from dataclasses import dataclass
from importlib import invalidate_caches, metadata
from typing import Any, Callable

import pluggy

from sigma_core import __version__, builtins, hookspecs
from sigma_core.config import check, require
from sigma_core.errors import (ComponentClashError, ComponentLoadError, ConfigError, PluginError, SigmaError,
                               UnknownComponentError, describe, one_line)

#: Kind ``x`` is registered through ``register_xs``; a "command" is a ``sigma`` subcommand (``register_commands``).
KINDS = hookspecs.KINDS

_log = logging.getLogger("sigma")


@dataclass(frozen=True)
class Component:
    """One registered component and where it came from.

    ``implementation`` is the class or function, or a lazy ``"module:attr"`` string that :meth:`load` imports.
    An op's (or update rule's) ``handler_kernels`` are ``(handler name, implementation)`` pairs: its faster
    versions per handler.
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

    def __post_init__(self):  # a malformed registration fails, and is reported, in the plugin that made it
        for name in (self.name, *self.aliases, *dict(self.handler_kernels)):
            if not isinstance(name, str) or not name:
                raise ValueError(f"{self.kind} names must be non-empty strings, got {name!r}")
        for target in (self.implementation, *dict(self.handler_kernels).values()):
            if isinstance(target, str) and "" in target.partition(":"):
                raise ValueError(f"{self.kind} {self.name!r}: a lazy implementation must look like "
                                 f"'package.module:attr', got {target!r}")
        if not isinstance(self.rank, int):  # a check that is not callable is unavailable: see availability
            raise TypeError(f"{self.kind} {self.name!r}: rank must be an int, got {self.rank!r}")

    def load(self) -> Any:
        """The component, importing a lazy implementation now."""
        return self._import(self.implementation, f"{self.kind} {self.name!r}")

    def load_kernel(self, handler: str) -> Any:
        """An op's (or update rule's) kernel for the handler named ``handler``, imported now; None if it has none."""
        kernel = dict(self.handler_kernels).get(handler)
        return None if kernel is None else self._import(kernel, f"the {handler!r} kernel of {self.kind} {self.name!r}")

    def load_for(self, handler: str, base: type) -> type:
        """The class that runs this op or update rule on the handler named ``handler``: its kernel there if one is
        registered, else its implementation, checked to subclass ``base``. A kernel that cannot be loaded is an
        error naming the handler and the distribution, never a quiet fall back to the slower rule."""
        cls = self.load_kernel(handler)
        where = f"the {handler!r} kernel of {self.kind} {self.name!r}" if cls is not None else f"{self.kind} {self.name!r}"
        cls = self.load() if cls is None else cls
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ComponentLoadError(f"{where} from {self.distribution} {self.version} is {cls!r}, not a "
                                     f"sigma_core.{base.__name__} subclass")
        return cls

    def _import(self, target, what: str) -> Any:
        try:
            return pkgutil.resolve_name(target) if isinstance(target, str) else target
        except Exception as exc:
            raise ComponentLoadError(f"{what} from {self.distribution} {self.version} "
                                     f"cannot be loaded from {target!r}: {describe(exc)}") from exc

    def availability(self) -> tuple[bool, str]:
        """Whether the component can run here, and if not, why (one line)."""
        if self.check is None:
            return True, ""
        try:
            available, reason = self.check()
        except Exception as exc:
            return False, f"check failed: {describe(exc)}"
        return bool(available), one_line(reason)


#: A plugin that could not be loaded: its entry point's name, distribution, version and ``"Type: message"``.
PluginFailure = collections.namedtuple("PluginFailure", "name distribution version error")


def components(kind: str | None = None) -> list[Component]:
    """Every registered component (of one kind), ordered by kind then name."""
    tables = _discovered().tables
    return [c for k in (KINDS if kind is None else (_checked(kind),))
            for key, c in sorted(tables[k].items()) if key == c.name]  # aliases are keys too


#: How every "not installed" message ends. The core names no distribution (what provides what changes with the
#: plugins, not with the core): docs/distributions.md, the site's Distributions page, says which one provides what.
MORE = "docs/distributions.md lists the plugins that provide more"


def get(kind: str, name: str) -> Component:
    """The component registered as ``name`` (or with that alias) for ``kind``."""
    table = _discovered().tables[_checked(kind)]
    if not isinstance(name, str):  # e.g. a run file's ``type = 3``
        raise UnknownComponentError(f"{kind} names are strings, not {name!r}")
    if name not in table:
        import difflib  # only on the error path

        if (kind, name) in builtins.MOVED_OUT:
            moved = builtins.MOVED_OUT[kind, name]
            raise UnknownComponentError(f"{kind} {name!r} is in the {moved} distribution, which is not installed: "
                                        f"install it (pip install ./plugins/{moved} in Sigma's repository)")
        close = difflib.get_close_matches(name, table, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        available = ", ".join(sorted({c.name for c in table.values()})) or "none"
        raise UnknownComponentError(f"unknown {kind} {name!r} ({hint}available: {available}); {MORE}")
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
    with _lock:
        _discover.cache_clear()
        invalidate_caches()


def build(kind: str, config: dict, *context, where: str | None = None, **context_keywords) -> Any:
    """Construct a registered component from ``{"type": name, **constructor arguments}`` (a run file's table).

    ``context`` and ``context_keywords`` are what the caller supplies (an operator's trainer). Every argument is
    checked (:func:`sigma_core.config.check`) before the constructor runs, so a bad one is a :class:`ConfigError`
    naming its run-file key (``where``).
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

_lock = threading.RLock()  # one discovery at a time; re-entrant, so a plugin asking for components cannot deadlock


#: What discovery found: components by kind, keyed by name and alias; failures; seconds per distribution.
_Discovery = collections.namedtuple("_Discovery", "tables failures load_seconds")


def _discovered() -> _Discovery:
    with _lock:
        return _discover()


@functools.cache
def _discover() -> _Discovery:
    discovery = _Discovery({kind: {} for kind in KINDS}, [], collections.Counter())
    _add(discovery.tables, _collect(builtins, "sigmann", __version__))  # the core's: a failure is a bug (traceback)
    strict = os.environ.get("SIGMA_STRICT_PLUGINS", "").strip().lower() in {"1", "true", "yes", "on"}
    for entry_point in _selected_entry_points():
        distribution, version = entry_point.dist.name, entry_point.dist.version
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
        discovery.load_seconds[distribution] += seconds
        _log.debug("plugin %r (%s %s) took %.3f s to load", entry_point.name, distribution, version, seconds)
        _add(discovery.tables, found)  # outside the try: a clash is not this plugin's failure alone
    return discovery


def _add(tables: dict[str, dict[str, Component]], found: list[Component]) -> None:
    for component in found:
        table, keys = tables[component.kind], dict.fromkeys((component.name, *component.aliases))
        if component.kind == "command":  # one named like the core's is left out, with a warning (sigma_core.cli)
            keys = {key: None for key in keys if getattr(table.get(key), "distribution", None) != "sigmann"}
        for key in keys:
            if key in table:
                raise ComponentClashError(
                    f"{component.kind} {key!r} is registered by both {table[key].distribution} and "
                    f"{component.distribution}; uninstall one, or leave one out with SIGMA_PLUGINS")
        table.update(dict.fromkeys(keys, component))


def _collect(plugin: object, distribution: str, version: str) -> list[Component]:
    """Run one plugin's ``register_*`` functions, on a plugin manager of its own, and return what it registered."""
    if hasattr(plugin, "register_monitors"):  # monitors used to be a kind of their own
        raise PluginError("register_monitors is gone: monitors are hooks now; register them with register_hooks "
                          "(sigma_core.Hook)")
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(plugin)
    manager.check_pending()  # a misspelt register_* name is an error, not a no-op
    found: list[Component] = []

    def register(kind, name, implementation, *, aliases=(), check=None, rank=0, description="", kernels=None):
        if kernels is not None and (kind not in ("op", "update_rule") or not isinstance(kernels, dict)):
            raise TypeError(f"{kind} {name!r}: kernels (a dict of handler name -> implementation) are for ops and "
                            "update rules only")
        aliases = (aliases,) if isinstance(aliases, str) else tuple(aliases)
        found.append(Component(kind, name, implementation, distribution, version, aliases, rank, description, check,
                               tuple((kernels or {}).items())))

    for kind in KINDS:
        if kind != "command":  # register_commands takes the parser (below)
            getattr(manager.hook, f"register_{kind}s")(register=functools.partial(register, kind))
    if manager.hook.register_commands.get_hookimpls():
        found += _commands(manager.hook.register_commands, distribution, version)
    return found


def _commands(register_commands, distribution: str, version: str) -> list[Component]:
    """The commands a plugin's ``register_commands`` adds, learnt on a scratch parser; the CLI calls it again
    with the real one."""
    scratch = argparse.ArgumentParser(prog="sigma").add_subparsers()
    register_commands(cli=scratch)
    helps = {action.dest: action.help or "" for action in scratch._get_subactions()}
    by_parser: dict[int, list[str]] = {}
    for name, parser in scratch.choices.items():  # an alias maps to its command's parser
        by_parser.setdefault(id(parser), []).append(name)
    return [Component("command", name, register_commands, distribution, version, tuple(aliases),
                      description=helps.get(name, "")) for name, *aliases in by_parser.values()]


def _selected_entry_points() -> list[metadata.EntryPoint]:
    def names(entry_point) -> set[str]:
        return {_normalise(entry_point.name), _normalise(entry_point.dist.name)}

    entry_points = sorted(metadata.entry_points(group="sigma"), key=lambda ep: (ep.dist.name, ep.name))
    allowlist = os.environ.get("SIGMA_PLUGINS")
    if allowlist is None:
        return entry_points
    wanted = {_normalise(name) for name in allowlist.split(",") if name.strip()}
    chosen = [ep for ep in entry_points if names(ep) & wanted]
    unmatched = wanted - set().union(*map(names, chosen)) - {"sigmann"}
    if unmatched:
        _log.warning("SIGMA_PLUGINS names %s, but no installed plugin matches", ", ".join(sorted(unmatched)))
    return chosen


def _normalise(name: str) -> str:
    """PEP 503 normalisation, so ``Sigmann_CPU`` matches ``sigmann-cpu``."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _checked(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown component kind {kind!r}; kinds are {', '.join(KINDS)}")
    return kind

"""Running attached hooks at the operator's events, in the foreground and in the background.

Foreground hooks run on the training thread, on the live registry, so they can
change the run (stop it, set the learning rate) before the next iteration.
Background hooks run one at a time on a worker thread, each group of
interdependent ones on a copy of the entries it declares (the live registry
keeps changing); what they write under ``shared``, and any exception they
raise, reaches the training thread at the next event.
"""

from __future__ import annotations

import numbers
from concurrent.futures import ThreadPoolExecutor

import numpy

from ..ndarray import NDArray
from ..registry import Registry, RegistryResolver, copy_value
from .access import HookError, write
from .base import Hook, close_over_dependencies, invocation_order
from .publication import Publication
from .timestep import TimeScale

_COPYABLE = (NDArray, numbers.Number, str, numpy.ndarray, list, tuple, dict, type(None))


class HookDispatcher:
    """The hooks attached to one operator, their countdowns, and the background worker."""

    def __init__(self, operator):
        self.operator = operator
        self.hooks: list[Hook] = []
        self.publication: Publication | None = None
        self._countdowns = {}  # id(hook) -> Countdown
        self._by_scale: dict[TimeScale, list[Hook]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._pending = []  # futures of background groups, oldest first

    def attach(self, *hooks: Hook) -> list[Hook]:
        """Attach hooks and everything they require; returns the hooks actually added."""
        added = close_over_dependencies(hooks, self.hooks)
        for hook in added:
            hook.operator = self.operator
            self._countdowns[id(hook)] = hook.time_step.countdown()
        self.hooks.extend(added)
        self._reorder()
        return added

    def _reorder(self):
        self._by_scale = {}
        for hook in invocation_order(self.hooks):
            self._by_scale.setdefault(hook.time_step.scale, []).append(hook)

    def start(self, trainer, started: float) -> None:
        """Publish the registry, let hooks prepare, and fire ``start`` hooks."""
        if self.hooks:
            self.publish(trainer, started)
            self.event(TimeScale.START)

    def publish(self, trainer, started: float) -> None:
        """Build the registry hooks read and let them prepare."""
        self.publication = Publication(trainer, started)
        for hook in invocation_order(self.hooks):
            hook.prepare(self.publication.registry, self.publication.resolver)

    def event(self, scale: TimeScale) -> None:
        """One event of ``scale``: run every hook whose time step is due and whose criteria pass."""
        if self._pending:
            self._collect(block=False)
        due = [hook for hook in self._by_scale.get(scale, ()) if self._countdowns[id(hook)].tick()]
        if not due:
            return
        self.publication.refresh()
        registry, resolver = self.publication.registry, self.publication.resolver
        for hook in due:
            if not hook.background and hook.should_invoke(resolver):
                hook.invoke(registry, resolver)
        background = [hook for hook in due if hook.background]
        if background:
            self._submit(background)
        if any(self._countdowns[id(hook)].dead for hook in due):
            self._detach_dead()

    def close(self) -> None:
        """Wait for background hooks, merge their results and stop the worker thread."""
        try:
            self._collect(block=True)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def _detach_dead(self):
        """Drop hooks whose live time is used up, unless a live hook still requires them."""
        dead = [h for h in self.hooks if self._countdowns[id(h)].dead]
        for hook in dead:
            if not any(r is hook for h in self.hooks if h not in dead for r in h.required_hooks):
                self.hooks = [h for h in self.hooks if h is not hook]
                del self._countdowns[id(hook)]
        self._reorder()

    def _submit(self, due: list[Hook]) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sigma-hooks")
        for group in _dependency_groups(due):
            entries = dict.fromkeys(entry for hook in group for entry in hook.entries)
            snapshot = _snapshot(self.publication.resolver, entries, group)
            self._pending.append(self._executor.submit(_run_group, group, snapshot))

    def _collect(self, block: bool) -> None:
        while self._pending and (block or self._pending[0].done()):
            shared = self._pending.pop(0).result()  # re-raises a background hook's exception here
            for identifier, value in shared:
                write(self.publication.resolver, identifier, value)


def _run_group(group: list[Hook], snapshot: Registry) -> list:
    """Run one group on its copy; return what it wrote under ``shared``."""
    resolver = RegistryResolver(snapshot)
    for hook in group:
        if hook.should_invoke(resolver):
            hook.invoke(snapshot, resolver)
    return list(_leaves(snapshot["shared"], "shared")) if "shared" in snapshot else []


def _dependency_groups(hooks: list[Hook]) -> list[list[Hook]]:
    """Split due hooks (in invocation order) into groups connected by requirements, order kept."""
    groups: list[list[Hook]] = []
    for hook in hooks:
        linked = [g for g in groups if any(r is h for r in hook.required_hooks for h in g)]
        groups = [g for g in groups if all(g is not l for l in linked)]
        groups.append([h for g in linked for h in g] + [hook])
    return groups


def _snapshot(resolver, entries, group) -> Registry:
    """A new registry holding copies of only ``entries``, at the same identifiers and tags."""
    snapshot = Registry()
    for identifier in entries:
        for full_id, value in resolver.resolve_get(identifier):
            *parents, key = full_id.split(".")
            source, target = resolver.root, snapshot
            for name in parents:
                source = source[name]
                if name not in target:
                    target[name] = Registry(source.tags)
                target = target[name]
            target[key] = _copy(value, full_id, group)
    return snapshot


def _copy(value, full_id: str, group):
    if isinstance(value, Registry):
        copied = Registry(value.tags)
        for key, item in value.items():
            copied[key] = _copy(item, f"{full_id}.{key}", group)
        return copied
    if isinstance(value, _COPYABLE):
        return copy_value(value)
    raise HookError(f"background hook(s) {', '.join(map(repr, group))} declare {full_id!r}, a live "
                    f"{type(value).__name__} that cannot be copied; run them in the foreground or declare plain values")


def _leaves(registry: Registry, prefix: str):
    for key, value in registry.items():
        if isinstance(value, Registry):
            yield from _leaves(value, f"{prefix}.{key}")
        else:
            yield f"{prefix}.{key}", value

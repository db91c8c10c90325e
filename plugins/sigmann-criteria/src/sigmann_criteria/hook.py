"""Sigma's declarative hooks, on the core's one hook protocol (:class:`sigma_core.Hook`).

A :class:`CriteriaHook` fires on its *cadence* (``every(10, "iteration")``,
``every(1, "epoch", live=3)``: counted from when a run attaches it), when its
*criteria* (``on``, :mod:`sigmann_criteria.criteria`) pass too, and reads and
writes the run's *registry* (:mod:`sigmann_criteria.publication`) by dot
identifiers with ``*`` wildcards and ``<tag>`` filters. It owns the hooks it
requires (a reporter its scorer), which run before it at each event, so a
result it reads is always fresh. In a run file::

    [[hooks]]
    type = "value_reporter"                        # any hook of this distribution
    values = ["optimiser.cost_total"]
    every = [1, "iteration"]                       # [interval, scale], [interval, scale, live] or "epoch"
    on = { extrema = "optimiser.cost_total", mode = "min" }
    priority = -5                                  # lower runs earlier (the core's order)
    background = false                             # true: on its own thread, on a copy of what it declares

What it writes under ``shared`` is published as a run value of the same name
(``shared.validation.accuracy_top1``), so the core's hooks read it too: the
``checkpoint`` hook's ``best``, ``early_stopping``'s ``value``, ``metrics``'
``values``.
"""

from __future__ import annotations

import re

from sigma_core import Hook, HookError

from .criteria import Criteria, criteria_from_config
from .publication import Publication, registry_from_values
from .cadence import TimeScale, Cadence, every, cadence_from_config

#: Registry identifiers whose run value has another name.
VALUE_NAMES = {"optimiser.cost_total": "cost", "optimiser.learning_rate": "learning_rate"}
#: Registry identifiers every event's values hold (so a background hook always has them).
HOST_VALUES = ("epoch", "iteration", "total_iterations", "runtime")


class CriteriaHook(Hook):
    """Base class: implement :meth:`invoke`; pass the settings that define what the hook does as ``parameters``.

    ``cadence=None`` means every event of the class's ``default_scale``. ``on``, ``priority`` and
    ``background`` are the run file's keys of the same names (see the module docstring).
    """

    default_scale = "iteration"
    default_priority = 0  # counter reporters run first, stoppers last

    def __init__(self, cadence=None, *, parameters: dict | None = None, requires=(), on=None,
                 priority: int | None = None, background: bool = False, target=None):
        if target is not None:  # Sigma's local and global hooks, for data-parallel workers
            raise HookError(f"{type(self).__name__}: target is gone: every hook runs once per event, on the run's "
                            "state; remove it")
        if cadence is None:
            cadence = every(1, self.default_scale)
        elif not isinstance(cadence, Cadence):
            cadence = cadence_from_config(cadence, "every")  # from a run file, its table names the hook
        self.cadence = cadence
        self.parameters = dict(parameters or {})
        self.required_entries: list[str] = list(requires)
        self.required_hooks: list[CriteriaHook] = []
        self.criteria = None
        if on is not None:
            self.on(on if isinstance(on, Criteria) else criteria_from_config(on, "on"))
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise HookError(f"{type(self).__name__}: priority must be an integer, got {priority!r}")
        self.order = self.default_priority if priority is None else priority
        if not isinstance(background, bool):
            raise HookError(f"{type(self).__name__}: background must be true or false, got {background!r}")
        self.threaded = background
        self._chain: list[CriteriaHook] = []  # during a run: the required hooks, then this one
        self._countdowns: dict = {}  # during a run: id(hook) -> its Countdown
        self._tags: dict = {}  # background: layer name -> tags, for the registry built from each copy

    def __repr__(self):
        settings = "".join(f"{k}={v!r}, " for k, v in self.parameters.items())
        return f"{type(self).__name__}({settings}{self.cadence})"

    def on(self, criteria) -> CriteriaHook:
        """Fire only when ``criteria`` pass too; a second call requires both."""
        self.criteria = criteria if self.criteria is None else self.criteria & criteria
        return self

    def require_hook(self, hook: CriteriaHook) -> CriteriaHook:
        """Declare a hook this one reads the results of: it runs before this one, at its own cadence."""
        self.required_hooks.append(hook)
        return hook

    @property
    def entries(self) -> tuple[str, ...]:
        """Everything this hook reads: declared entries and its criteria's."""
        criteria = self.criteria.required_entries if self.criteria is not None else ()
        return tuple(dict.fromkeys([*self.required_entries, *criteria]))

    def prepare(self, registry, resolver) -> None:
        """Called on the training thread when a run attaches the hook, before any event."""

    def should_invoke(self, resolver) -> bool:
        return self.criteria is None or self.criteria.check(resolver)

    def invoke(self, registry, resolver) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement invoke()")

    # -- the core's protocol ------------------------------------------------------------------------------------
    def attach(self, run):
        super().attach(run)
        self._chain = dependency_order(self)
        self._countdowns = {id(hook): hook.cadence.countdown() for hook in self._chain}
        scales = {hook.cadence.scale for hook in self._chain}
        # The core delivers the events the chain's cadences count; the countdowns pick the due ones.
        self.every = 1 if TimeScale.ITERATION in scales else (1, "epoch") if TimeScale.EPOCH in scales else (0, "epoch")
        publication = Publication.of(run)
        for hook in self._chain:
            hook.prepare(publication.registry, publication.resolver)
        if self.threaded:
            self._tags = publication.layer_tags()
            reads = tuple(dict.fromkeys(value_name(entry, self) for hook in self._chain for entry in hook.entries))
            self.reads = {f"on_{scale.value}": reads for scale in scales}

    def on_start(self):
        self.fire(TimeScale.START)

    def on_iteration(self):
        self.fire(TimeScale.ITERATION)

    def on_epoch(self, report):
        self.fire(TimeScale.EPOCH)

    def on_pause(self):
        self.fire(TimeScale.PAUSE)

    def on_resume(self):
        self.fire(TimeScale.RESUME)

    def on_reset(self):
        self.fire(TimeScale.RESET)

    def on_stop(self):
        self.fire(TimeScale.STOP)

    def fire(self, scale: TimeScale) -> None:
        """One event of ``scale``: invoke the hooks of the chain whose cadence is due and whose criteria pass."""
        due = [hook for hook in self._chain if hook.cadence.scale is scale and self._countdowns[id(hook)].tick()]
        if not due:
            return
        if self.threaded:  # a registry of the copy the core made for this hook's thread
            publication = Publication(registry_from_values(self.run.values, self._tags))
        else:
            publication = Publication.of(self.run)
            publication.refresh()
        for hook in due:
            if hook.should_invoke(publication.resolver):
                hook.invoke(publication.registry, publication.resolver)
        publication.publish_shared(self.run)


def value_name(entry: str, hook) -> str:
    """The run value (name or pattern) a background hook needs copied to read registry ``entry``."""
    if entry in VALUE_NAMES:
        return VALUE_NAMES[entry]
    if entry in HOST_VALUES or entry.startswith("shared."):
        return entry  # always in a threaded hook's copy
    if entry.startswith(("network.layers.", "optimiser.updates.")):
        return re.sub(r"<[^>]*>", "", entry)  # tags filter again in the registry built from the copy
    raise HookError(f"background hook {hook!r} declares {entry!r}, which is live and cannot be copied to its thread; "
                    "run it in the foreground (background = false) or declare plain values")


def dependency_order(hook: CriteriaHook) -> list[CriteriaHook]:
    """``hook``'s required hooks (and theirs), each before the hooks that require it, then ``hook`` itself."""
    order: list[CriteriaHook] = []
    visiting: list[CriteriaHook] = []

    def visit(current: CriteriaHook) -> None:
        if any(current is v for v in visiting):
            cycle = visiting[next(i for i, v in enumerate(visiting) if v is current):] + [current]
            raise HookError("hook dependency cycle: " + " -> ".join(repr(h) for h in cycle))
        if any(current is o for o in order):
            return
        visiting.append(current)
        for required in current.required_hooks:
            visit(required)
        visiting.pop()
        order.append(current)

    visit(hook)
    return order

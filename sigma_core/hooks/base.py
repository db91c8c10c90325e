"""The Hook interface, and how a set of hooks is closed over its dependencies and ordered.

A hook fires on its :class:`~sigma_core.hooks.timestep.TimeStep` when its
criteria (if any) pass, and reads and writes the operator's registry through
a resolver. What it declares lets the operator run it well:

``required_entries``
    Registry identifiers it reads. A background hook gets a copy of exactly
    these (plus its criteria's), because it runs while training goes on and
    the live values keep changing.
``required_hooks``
    Hooks whose results it reads (a reporter needs its scorer). They are
    attached with it, run before it, and a functionally equal hook that is
    already attached is reused instead of being attached twice.
``priority``
    Lower runs earlier within one event; dependencies still run first.
``target``
    ``"local"`` hooks run per worker on that worker's state, ``"global"``
    hooks once on the merged state after all workers reach the event. With
    one worker both see the same state; locals run first, as in Sigma.
``background``
    Runs off the training thread on the copied entries; see
    :mod:`sigma_core.hooks.dispatch`.
"""

from __future__ import annotations

from .access import HookError
from .timestep import TimeStep

TARGETS = ("local", "global")


class Hook:
    """Base class: subclasses implement :meth:`invoke` and pass their settings as ``parameters``.

    ``parameters`` are what makes two hooks do the same thing; together with
    the class and the time step they decide :meth:`functionally_equals`.
    """

    #: Where the hook runs unless told otherwise; see the module docstring.
    default_target = "local"
    #: Lower runs earlier. Reporters of counters run first, stoppers last.
    default_priority = 0

    def __init__(self, time_step: TimeStep, *, parameters: dict | None = None, requires=()):
        if not isinstance(time_step, TimeStep):
            raise HookError(f"{type(self).__name__}: time_step must be a TimeStep, got {time_step!r}")
        self.time_step = time_step
        self.parameters = dict(parameters or {})
        self.required_entries: list[str] = list(requires)
        self.required_hooks: list[Hook] = []
        self.criteria = None
        self.priority = self.default_priority
        self.target = self.default_target
        self.background = False
        #: The operator running this hook, set when it is attached (stoppers signal it).
        self.operator = None

    def __repr__(self):
        settings = ", ".join(f"{k}={v!r}" for k, v in self.parameters.items())
        return f"{type(self).__name__}({settings}{', ' if settings else ''}{self.time_step})"

    # -- fluent configuration ------------------------------------------------------------
    def on(self, criteria) -> "Hook":
        """Fire only when ``criteria`` pass too; a second call requires both."""
        self.criteria = criteria if self.criteria is None else self.criteria & criteria
        return self

    def in_background(self) -> "Hook":
        """Run off the training thread, on a copy of the declared registry entries."""
        self.background = True
        return self

    def with_priority(self, priority: int) -> "Hook":
        self.priority = int(priority)
        return self

    def targeting(self, target: str) -> "Hook":
        if target not in TARGETS:
            raise HookError(f"{self!r}: target must be one of {', '.join(TARGETS)}, got {target!r}")
        self.target = target
        return self

    # -- declarations, for subclasses -------------------------------------------------------
    def require_hook(self, hook: "Hook") -> "Hook":
        """Declare ``hook`` as a dependency; returns the hook to keep a reference to.

        If an equal hook is already attached, the operator reuses it and the
        returned object is replaced there; subclasses should read results from
        the registry, not from the dependency object.
        """
        self.required_hooks.append(hook)
        return hook

    @property
    def entries(self) -> tuple[str, ...]:
        """Everything this hook reads: declared entries and its criteria's."""
        criteria = self.criteria.required_entries if self.criteria is not None else ()
        return tuple(dict.fromkeys([*self.required_entries, *criteria]))

    def functionally_equals(self, other: "Hook") -> bool:
        """Same class, time step, settings, target and criteria: attaching both would do the work twice."""
        return (
            type(self) is type(other)
            and self.time_step == other.time_step
            and self.parameters == other.parameters
            and self.target == other.target
            and self.background == other.background
            and self.criteria == other.criteria
        )

    # -- running ------------------------------------------------------------------------------
    def prepare(self, registry, resolver) -> None:
        """Called once on the training thread before the first iteration.

        For hooks that must change the run before it starts: a learning-rate
        schedule sets the first step's rate, the metric processor asks the
        optimiser to publish its updates.
        """

    def should_invoke(self, resolver) -> bool:
        return self.criteria is None or self.criteria.check(resolver)

    def invoke(self, registry, resolver) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement invoke()")


def close_over_dependencies(hooks, attached=()) -> list[Hook]:
    """``hooks`` plus every hook they require, minus those functionally equal to one already present.

    ``attached`` are hooks already running; a required hook equal to one of
    them is reused (the dependent's ``required_hooks`` is rewritten to point
    at it). Returns only the hooks that are new, in dependency order.
    Raises :class:`HookError` naming the hooks of a dependency cycle, or a
    dependency whose background setting differs from its dependent's.
    """
    known = list(attached)
    added: list[Hook] = []
    visiting: list[Hook] = []

    def visit(hook: Hook) -> Hook:
        if any(hook is v for v in visiting):
            cycle = visiting[next(i for i, v in enumerate(visiting) if v is hook):] + [hook]
            raise HookError("hook dependency cycle: " + " -> ".join(repr(h) for h in cycle))
        existing = next((h for h in known if h is hook or h.functionally_equals(hook)), None)
        if existing is not None:
            return existing
        visiting.append(hook)
        for index, required in enumerate(hook.required_hooks):
            if required.background != hook.background:
                raise HookError(
                    f"{hook!r} requires {required!r}, but only one of them runs in the background; "
                    "a hook and its dependencies must run on the same thread"
                )
            hook.required_hooks[index] = visit(required)
        visiting.pop()
        known.append(hook)
        added.append(hook)
        return hook

    for hook in hooks:
        visit(hook)
    return added


def invocation_order(hooks) -> list[Hook]:
    """Locals before globals, then lowest priority first; every hook after the hooks it requires.

    A required hook runs as early as the most urgent hook that needs it (it
    inherits the lowest priority among its dependents), so a dependency does
    not delay its dependent behind unrelated hooks. Ties keep attach order.
    """
    position = {id(hook): i for i, hook in enumerate(hooks)}
    urgency = {id(hook): (hook.target == "global", hook.priority) for hook in hooks}
    for hook in reversed(hooks):  # dependencies come before dependents in attach order
        for required in hook.required_hooks:
            if id(required) in urgency:
                urgency[id(required)] = min(urgency[id(required)], urgency[id(hook)])
    pending = {id(hook): {id(r) for r in hook.required_hooks if id(r) in position} for hook in hooks}
    order: list[Hook] = []
    remaining = list(hooks)
    while remaining:
        ready = [h for h in remaining if not pending[id(h)]]
        chosen = min(ready, key=lambda h: (urgency[id(h)], position[id(h)]))
        order.append(chosen)
        remaining.remove(chosen)
        for waiting in pending.values():
            waiting.discard(id(chosen))
    return order

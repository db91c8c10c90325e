"""The Hook interface, and how a set of hooks is closed over its dependencies and ordered.

A hook fires on its time step when its criteria (if any) pass. It declares
``required_entries`` (identifiers it reads: all a background hook gets a copy
of), ``required_hooks`` (hooks whose results it reads: attached with it and run
before it), ``priority`` (lower runs earlier) and ``target`` (``"local"`` per
worker, ``"global"`` once on the merged state; with one worker locals run first).
"""

from __future__ import annotations

from .access import HookError
from .timestep import TimeStep, every

TARGETS = ("local", "global")


class Hook:
    """Base class: implement :meth:`invoke`; pass the settings that define what the hook does as ``parameters``.

    ``time_step=None`` means every event of the class's ``default_scale``.
    """

    default_scale = "iteration"
    default_target = "local"
    default_priority = 0  # counter reporters run first, stoppers last

    def __init__(self, time_step: TimeStep | None = None, *, parameters: dict | None = None, requires=()):
        time_step = every(1, self.default_scale) if time_step is None else time_step
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
        self.operator = None  # the operator running this hook, set on attach (stoppers signal it)

    def __repr__(self):
        settings = "".join(f"{k}={v!r}, " for k, v in self.parameters.items())
        return f"{type(self).__name__}({settings}{self.time_step})"

    def on(self, criteria) -> Hook:
        """Fire only when ``criteria`` pass too; a second call requires both."""
        self.criteria = criteria if self.criteria is None else self.criteria & criteria
        return self

    def in_background(self) -> Hook:
        """Run off the training thread, on a copy of the declared registry entries."""
        self.background = True
        return self

    def with_priority(self, priority: int) -> Hook:
        self.priority = int(priority)
        return self

    def targeting(self, target: str) -> Hook:
        if target not in TARGETS:
            raise HookError(f"{self!r}: target must be one of {', '.join(TARGETS)}, got {target!r}")
        self.target = target
        return self

    def require_hook(self, hook: Hook) -> Hook:
        """Declare a dependency; an equal hook already attached may replace it, so read results from the registry."""
        self.required_hooks.append(hook)
        return hook

    @property
    def entries(self) -> tuple[str, ...]:
        """Everything this hook reads: declared entries and its criteria's."""
        criteria = self.criteria.required_entries if self.criteria is not None else ()
        return tuple(dict.fromkeys([*self.required_entries, *criteria]))

    def functionally_equals(self, other: Hook) -> bool:
        """Attaching both would do the same work twice."""
        return (type(self) is type(other) and self.time_step == other.time_step
                and self.parameters == other.parameters and self.target == other.target
                and self.background == other.background and self.criteria == other.criteria)

    def prepare(self, registry, resolver) -> None:
        """Called on the training thread before the first iteration."""

    def should_invoke(self, resolver) -> bool:
        return self.criteria is None or self.criteria.check(resolver)

    def invoke(self, registry, resolver) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement invoke()")


def close_over_dependencies(hooks, attached=()) -> list[Hook]:
    """``hooks`` and their requirements that are new, in dependency order.

    A hook functionally equal to one already known is reused: dependents'
    ``required_hooks`` are rewritten to point at it.
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
                raise HookError(f"{hook!r} requires {required!r}, but only one of them runs in the background; "
                                "a hook and its dependencies must run on the same thread")
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

    A required hook inherits the most urgent priority among its dependents, so
    it does not delay them behind unrelated hooks. Ties keep attach order.
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
        chosen = min((h for h in remaining if not pending[id(h)]), key=lambda h: (urgency[id(h)], position[id(h)]))
        order.append(chosen)
        remaining.remove(chosen)
        for waiting in pending.values():
            waiting.discard(id(chosen))
    return order

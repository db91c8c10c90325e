"""The Hook protocol: the one way code takes part in a run, from a learning-rate schedule to a web dashboard.

A hook is a :class:`Hook` subclass that overrides the events it wants; the
loop emits each event once, and the dispatcher (:mod:`sigma_core.hooks.dispatch`)
calls only the hooks that override it, so an event nobody wants costs nothing:

``on_start()``          before the first iteration of a run
``on_iteration()``      after each training step (every :attr:`Hook.every` iterations)
``on_epoch(report)``    after each epoch and its validation; ``report`` is the
                        :class:`~sigma_core.loop.EpochReport`
``on_pause()``, ``on_resume()``  when the loop blocks and wakes again
``on_reset()``          after the trainer was put back to its initial state
``on_stop()``           when the run ends without an error

**What it reads.** ``self.run`` (a :class:`~sigma_core.hooks.values.RunView`)
holds the run's values at the event as one flat, read-only mapping,
``self.run.values`` (``"cost"``, ``"learning_rate"``, ``"epoch"``,
``"validation.accuracy"``, ... see :mod:`sigma_core.hooks.values`), and on the
training thread the live ``trainer``, ``network`` and ``optimiser`` for hooks
that steer. Commands (``self.run.command("stop")``) reach the loop at its next
iteration boundary.

**Where it runs.** By default on the training thread (inline): the hook may
read and change anything live, at an exact boundary, and training waits for
it. A hook that does I/O or may be slow sets ``threaded = True``: its events go
through a bounded queue of :attr:`Hook.queue_size` to its own thread and the
training thread never waits; when the queue is full the oldest iteration event
makes room (if none is queued, the new event goes). It reads a copy of the
values made on the training thread when the event happened: the host values,
plus the device values (the cost, parameters) that :attr:`Hook.reads` names.

**Failures.** A threaded hook that raises, or an inline one that raises
anything but a :class:`~sigma_core.errors.SigmaError`, is detached and
reported once in one line naming it; training goes on. An inline hook raises a
``SigmaError`` on purpose (a NaN in a weight, a checkpoint that cannot be
written): that ends the run with its message.

Run files list hooks in ``[[hooks]]`` (``[[monitors]]`` too, the older name),
``sigma train --monitor NAME[:key=value,...]`` adds one, and plugins register
more with ``register_hooks``.
"""

from __future__ import annotations

from ..errors import SigmaError

#: The events of a run, in the order a run meets them first; a hook overrides ``on_<event>``.
EVENTS = ("start", "iteration", "epoch", "pause", "resume", "reset", "stop")


class HookError(SigmaError):
    """A hook is misconfigured, reads a value the run does not have, or asks for what it may not; names it."""


class Hook:
    """Base class for hooks: override the events you want; see the module docstring."""

    #: The name messages use; building a hook from a run file sets it to the registered name.
    name = "hook"
    #: How often: ``n`` (or ``(n, "iteration")``): ``on_iteration`` on every n-th iteration of the run
    #: (0: never) and ``on_epoch`` after every epoch; ``(n, "epoch")``: ``on_epoch`` after every n-th
    #: epoch and no ``on_iteration``. Run files write ``every = 10`` or ``every = [2, "epoch"]``.
    every = 1
    #: Lower runs earlier at an event; equal orders keep the order the hooks were given in.
    order = 0
    #: Receive events on an own thread through a bounded queue (True) or on the training thread (False).
    threaded = False
    #: Events a threaded hook may fall behind by before events are dropped.
    queue_size = 64
    #: How long the end of a run waits for a threaded hook to work through its queue.
    drain_seconds = 10.0
    #: Threaded hooks: event method -> names of device values to copy for it (wildcards allowed),
    #: e.g. ``{"on_iteration": ("cost",), "on_epoch": ("network.layers.*.weights",)}``; assign, do not mutate.
    reads: dict = {}
    #: The run as this hook sees it (a RunView); set when a run attaches the hook, and per event for threaded ones.
    run = None
    #: Threaded hooks: events dropped in the last run because the queue was full.
    dropped = 0

    def __repr__(self):
        return f"<hook {self.name}>"

    # -- life cycle (training thread) -----------------------------------------------------------
    def attach(self, run) -> None:
        """Called on the training thread when a run starts, before any event: set up here (it may read live
        objects even when threaded). ``run`` is the :class:`~sigma_core.hooks.values.RunView`."""
        self.run = run

    def detach(self) -> None:
        """Called when the run has ended (also after an error), on the thread the events ran on: release here."""

    # -- events ------------------------------------------------------------------------------------
    def on_start(self) -> None: ...

    def on_iteration(self) -> None: ...

    def on_epoch(self, report) -> None:
        """``report`` is the :class:`~sigma_core.loop.EpochReport` of the epoch just ended."""

    def on_pause(self) -> None: ...

    def on_resume(self) -> None: ...

    def on_reset(self) -> None: ...

    def on_stop(self) -> None: ...


def overrides(hook, event: str) -> bool:
    """Whether ``hook`` implements ``on_<event>`` itself (so calling it is worth the time)."""
    method = f"on_{event}"
    return getattr(type(hook), method, None) is not getattr(Hook, method)


def schedule(hook) -> tuple[int, int]:
    """``hook.every`` as (iteration interval, epoch interval); 0: never. Refuses anything else in one line."""
    every = hook.every
    if isinstance(every, (list, tuple)) and len(every) == 2 and every[1] in ("iteration", "epoch"):
        interval, unit = every
    else:
        interval, unit = every, "iteration"
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        raise HookError(f"hook {hook.name!r}: every must be an integer >= 0 or [n, \"iteration\" or \"epoch\"], "
                        f"got {every!r}")
    return (interval, 1) if unit == "iteration" else (0, interval)

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
iteration boundary. A hook that writes files writes them into
``self.run.directory``, the run's own directory (``runs/<name>/version_N``,
:mod:`sigma_core.rundir`), unless it is told another.

**Where it runs.** By default on the training thread (inline): the hook may
read and change anything live, at an exact boundary, and training waits for
it. A hook that does I/O or may be slow sets ``threaded = True``: its events go
through a bounded queue of :attr:`Hook.queue_size` to its own thread and the
training thread never waits; when the queue is full the oldest iteration event
makes room (if none is queued, the new event goes). It reads a copy of the
values made on the training thread when the event happened: the host values,
plus the device values (the cost, parameters) that :attr:`Hook.reads` names.
Python threads share one interpreter lock, so a threaded hook's own Python
work is time taken from training; its thread keeps to :attr:`Hook.share` of
the interpreter while training runs (see :class:`~sigma_core.hooks.dispatch.Throttle`),
so that even a hook that computes for a second per event costs training a
few percent. Waiting (on a disk, the network, a sleep) costs nothing.

**Failures.** A hook that fails is named in one line (``hook 'web' failed in
on_iteration: OSError: ...``, a warning on the ``sigma`` logger; the
dispatcher's ``failures`` lists them) and detached: it gets no more events,
its ``detach`` is called, and training goes on, as it would without the
hook. That holds wherever it fails (``attach``, any event, ``detach``), inline
or threaded, and whatever it raises, ``SystemExit`` included: ``sys.exit()``
in a plugin would otherwise end a long run with no word. A hook that means
to end the run says so: ``self.run.command("stop", reason="...")`` stops it at
the next boundary (``on_stop`` follows, and ``sigma train`` prints the reason and exits 0),
and a ``SigmaError`` ends it with a reason. What ends the run, after every
hook is detached:

- a :class:`~sigma_core.errors.SigmaError` raised on the training thread (in
  an inline hook's event or any hook's ``attach``): a hook refuses on purpose
  (a NaN in a weight, a port already taken), and ``sigma train`` prints its
  message as its one error line and exits with status 2. What the run saved
  before stays; a threaded hook's ``SigmaError`` only detaches it;
- a ``KeyboardInterrupt`` that may be the user's Ctrl-C: one on the main
  thread while Python's own Ctrl-C handler is installed (:func:`could_be_ctrl_c`).
  It propagates as Ctrl-C does from anywhere in the loop (``sigma train``
  installs its own handler, which stops at the next boundary and saves a
  checkpoint to resume from). A ``KeyboardInterrupt`` a hook raises itself,
  on its thread or under that handler, is the hook's failure.

A hook whose constructor raises, building a run from a run file or
``--monitor``, is refused in one line naming its table (``hooks[1]: hook
'web' failed while being built: ...``) before anything trains. Settings out of
range (``every``, ``queue_size``, ``share``, ``drain_seconds``) are refused in
one line when the hook is given to a loop.

Run files list hooks in ``[[hooks]]`` (``[[monitors]]`` too, the older name),
``sigma train --monitor NAME[:key=value,...]`` adds one, and plugins register
more with ``register_hooks``.
"""

from __future__ import annotations

import math
import signal
import threading

from ..errors import SigmaError, describe

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
    #: Threaded hooks: the largest part of the interpreter (in (0, 1]) the hook's thread takes while training
    #: runs; 1: as much as the interpreter lock gives it (see :class:`~sigma_core.hooks.dispatch.Throttle`).
    share = 0.05
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


def could_be_ctrl_c(error: BaseException) -> bool:
    """Whether ``error`` may be the user's Ctrl-C rather than a hook's own doing.

    Ctrl-C raises ``KeyboardInterrupt`` only on the main thread, and only while Python's default handler
    (:func:`signal.default_int_handler`) is installed; anywhere else (a hook's thread, a loop started on its own
    thread, ``sigma train``, which handles Ctrl-C itself) a ``KeyboardInterrupt`` was raised by code.
    """
    return (isinstance(error, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)


def failure(where: str, error: BaseException) -> str:
    """What a hook's failure in ``where`` (``"on_iteration"``, ``"attach"``, ...) is reported as, on one line."""
    if isinstance(error, SystemExit):
        code = "" if error.code is None else repr(error.code)
        return (f"{where}: it called sys.exit({code}); a hook ends a run with run.command(\"stop\") or a "
                "SigmaError, never by ending the process")
    if isinstance(error, KeyboardInterrupt):
        return f"{where}: KeyboardInterrupt raised by the hook itself (not Ctrl-C)"
    return f"{where}: {describe(error)}"


def check(hook) -> None:
    """Refuse, in one line naming the hook and the setting, a schedule or a threading setting out of range."""
    schedule(hook)
    for setting, (valid, rule) in SETTINGS.items():
        value = getattr(hook, setting)
        if not valid(value):
            raise HookError(f"hook {hook.name!r}: {setting} must be {rule}, got {value!r}")
    if not isinstance(hook.reads, dict):
        raise HookError(f"hook {hook.name!r}: reads must be a dict of event method -> value names, got {hook.reads!r}")


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: The class settings :func:`check` holds a hook to (``every`` aside: :func:`schedule`), and their rules in words.
SETTINGS = {
    "queue_size": (lambda n: _integer(n) and n >= 1, "an integer >= 1"),
    "drain_seconds": (lambda s: _real(s) and s >= 0, "a number >= 0"),
    "share": (lambda s: _real(s) and 0 < s <= 1, "a number in (0, 1]"),
    "order": (_real, "a number"),
    "threaded": (lambda t: isinstance(t, bool), "true or false"),
}


def schedule(hook) -> tuple[int, int]:
    """``hook.every`` as (iteration interval, epoch interval); 0: never. Refuses anything else in one line."""
    every = hook.every
    if isinstance(every, (list, tuple)) and len(every) == 2 and every[1] in ("iteration", "epoch"):
        interval, unit = every
    else:
        interval, unit = every, "iteration"
    if not _integer(interval) or interval < 0:
        raise HookError(f"hook {hook.name!r}: every must be an integer >= 0 or [n, \"iteration\" or \"epoch\"], "
                        f"got {every!r}")
    return (interval, 1) if unit == "iteration" else (0, interval)

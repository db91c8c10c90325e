"""The Hook protocol: the one way code takes part in a run, from a learning-rate schedule to a web dashboard.

A hook overrides the events it wants (:data:`EVENTS`: ``on_start()``,
``on_iteration()``, ``on_epoch(report)``, ``on_pause()``, ``on_resume()``,
``on_reset()``, ``on_stop()``); the dispatcher calls only those, so an event
nobody wants costs nothing. ``self.run`` (a :class:`~sigma_core.hooks.values.RunView`)
holds the run's values and, on the training thread, the live objects.
A hook runs on the training thread unless it sets ``threaded = True``. One that
fails, whatever it raises, is named in one line and detached, and training goes
on; a :class:`~sigma_core.errors.SigmaError` on the training thread, or what may
be the user's Ctrl-C (:func:`could_be_ctrl_c`), ends the run instead.
docs/plugins.md ("Hook") is the full contract: threads, values, commands, failures.
"""

import signal
import threading

from sigma_core.config import accepts, describe_rule
from sigma_core.errors import SigmaError, describe

#: The events of a run, in the order a run meets them first; a hook overrides ``on_<event>``.
EVENTS = ("start", "iteration", "epoch", "pause", "resume", "reset", "stop")


class HookError(SigmaError):
    """A hook is misconfigured, reads a value the run does not have, or asks for what it may not; names it."""


class Hook:
    """Base class for hooks: override the events you want; see the module docstring."""

    #: The name messages use; building a hook from a run file sets it to the registered name.
    name = "hook"
    #: ``n`` (or ``(n, "iteration")``): ``on_iteration`` every n-th iteration of the run (0: never), ``on_epoch``
    #: every epoch; ``(n, "epoch")``: ``on_epoch`` every n-th epoch, no ``on_iteration``.
    every = 1
    #: Lower runs earlier at an event; equal orders keep the order the hooks were given in.
    order = 0
    #: Receive events on an own thread through a bounded queue (True) or on the training thread (False).
    threaded = False
    #: Events a threaded hook may fall behind by in memory; past that they wait in a file (hooks/spool.py).
    queue_size = 1024
    #: Threaded hooks: drop the oldest iteration events past ``queue_size`` (a live chart); else get every event.
    lossy = False
    #: How long the end of a run waits for a threaded hook to work through its queue.
    drain_seconds = 10.0
    #: Threaded hooks: the part of the interpreter (in (0, 1]; 1: no limit) its thread may take while training runs.
    share = 0.05
    #: Threaded hooks: event method -> names of device values to copy for it (wildcards allowed),
    #: e.g. ``{"on_iteration": ("cost",), "on_epoch": ("network.layers.*.weights",)}``; assign, do not mutate.
    reads: dict = {}
    #: The run as this hook sees it (a RunView); set when a run attaches the hook, and per event for threaded ones.
    run = None
    #: The run-config table the hook was built from (None if made in code); checkpoints save the run config, so a
    #: hook may record there what a resumed run needs (as a key its constructor takes): ``mlflow``, its run id.
    table = None
    #: Lossy threaded hooks: events dropped in the last run because the queue was full.
    dropped = 0

    def __repr__(self):
        return f"<hook {self.name}>"

    def attach(self, run) -> None:
        """Called on the training thread before any event (even for a threaded hook): set up here."""
        self.run = run

    def detach(self) -> None:
        """Called when the run has ended (also after an error), on the thread the events ran on: release here."""

    def on_start(self) -> None: ...

    def on_iteration(self) -> None: ...

    def on_epoch(self, report) -> None:
        """``report`` is the :class:`~sigma_core.training.loop.EpochReport` of the epoch just ended."""

    def on_pause(self) -> None: ...

    def on_resume(self) -> None: ...

    def on_reset(self) -> None: ...

    def on_stop(self) -> None: ...


def overrides(hook, event: str) -> bool:
    """Whether ``hook`` implements ``on_<event>`` itself (so calling it is worth the time)."""
    method = f"on_{event}"
    return getattr(type(hook), method, None) is not getattr(Hook, method)


def could_be_ctrl_c(error: BaseException) -> bool:
    """Whether ``error`` may be the user's Ctrl-C: a ``KeyboardInterrupt`` on the main thread while Python's own
    handler is installed; anywhere else (a hook's thread, ``sigma train``'s own handler) code raised it."""
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


#: The class settings :func:`check` holds a hook to, as :mod:`sigma_core.config` rules (``every``: :func:`schedule`).
SETTINGS = {"queue_size": "int >= 1", "drain_seconds": "real >= 0", "share": "real in (0, 1]", "order": "real",
            "threaded": "bool", "lossy": "bool"}


def check(hook) -> None:
    """Refuse, in one line naming the hook and the setting, a schedule or a threading setting out of range."""
    schedule(hook)
    for setting, rule in SETTINGS.items():
        value = getattr(hook, setting)
        if not accepts(rule, value):
            raise HookError(f"hook {hook.name!r}: {setting} must be {describe_rule(rule)}, got {value!r}")
    if not isinstance(hook.reads, dict):
        raise HookError(f"hook {hook.name!r}: reads must be a dict of event method -> value names, got {hook.reads!r}")


def schedule(hook) -> tuple[int, int]:
    """``hook.every`` as (iteration interval, epoch interval); 0: never. Refuses anything else in one line."""
    every = hook.every
    interval, unit = every if isinstance(every, (list, tuple)) and len(every) == 2 else (every, "iteration")
    if unit not in ("iteration", "epoch") or not accepts("int >= 0", interval):
        raise HookError(f"hook {hook.name!r}: every must be an integer >= 0 or [n, \"iteration\" or \"epoch\"], "
                        f"got {every!r}")
    return (interval, 1) if unit == "iteration" else (0, interval)

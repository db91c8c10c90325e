"""Monitors: how the world outside the training loop watches and steers a run.

In Sigma a monitor is how someone who is not a framework programmer talks to
training: it reads the registry and sends commands back. A monitor is
attached to an operator (``[[monitors]]`` in a run file, ``--monitor
NAME[:key=value,...]`` on ``sigma train``, ``operator.attach_monitor(m)``)
and gets the operator's events right after their hooks: ``on_start``,
``on_iteration`` (every :attr:`Monitor.every` iterations), ``on_epoch(report)``,
``on_pause``, ``on_resume``, ``on_reset``, ``on_stop``; only those it overrides.

**Where it runs.** By default on the training thread: it may read anything
live (:attr:`Monitor.registry`, the trainer) and act at an exact boundary
(stop after iteration n, save a checkpoint), but training waits while it
runs. A monitor that does I/O or may be slow sets ``threaded = True``: its
events go through a queue of :attr:`Monitor.queue_size` to its own thread and
the training thread never waits. When the queue is full, the oldest queued
iteration event makes room (if there is none, the new event goes); drops are
counted in :attr:`Monitor.dropped` and logged. At the end of a run the
operator waits up to :attr:`Monitor.drain_seconds` for the queue to empty.

**What it reads.** Each event carries, made on the training thread when it
happened, :attr:`Monitor.values` (the registry's scalars under their registry
names, see :func:`snapshot`) and :attr:`Monitor.read` (copies of the numbers,
strings and arrays, as NumPy arrays, among the registry keys it names in
:attr:`Monitor.reads` for that event; wildcards and tags allowed:
``{"on_epoch": ("network.layers.*.weights",)}``).
A threaded monitor reads only these, its event's arguments and what never
changes (``trainer.name``, ``trainer.run_config``); :attr:`Monitor.registry`
refuses to be read from its thread.

**Failures.** A monitor that raises is detached and reported once, naming it
and the error (a warning, and ``operator.monitor_failures``); training goes on.

**Commands** go back through :meth:`Monitor.command`, safe from any thread:
``pause``, ``resume``, ``stop``, ``reset``, ``step`` (one iteration, then
paused again), ``set`` (``key="optimiser.learning_rate", value=0.01``) and
``call`` (``fn=...``, returns a Future of its result), applied by the training
thread at its next iteration boundary.

Hooks are the other half: a hook is part of the training logic (a schedule, a
stopper, a checkpoint), a monitor is an observer with a command channel.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from .errors import SigmaError

log = logging.getLogger("sigma")

#: The callbacks a monitor may override, one per operator event.
EVENTS = ("on_start", "on_iteration", "on_epoch", "on_pause", "on_resume", "on_reset", "on_stop")

#: How long an idle threaded monitor lets events gather before it waits to be woken (latency for throughput).
NAP_SECONDS = 0.01


class MonitorError(SigmaError):
    """A monitor failed or was asked for something it cannot do; the message names it."""


class Monitor:
    """Base class for monitors; see the module docstring."""

    #: The name messages use; ``sigma train`` sets it to the registered name.
    name = "monitor"
    #: Receive events on an own thread through a bounded queue (True) or on the training thread (False).
    threaded = False
    #: Events a threaded monitor may fall behind by before events are dropped.
    queue_size = 64
    #: How long the end of a run waits for a threaded monitor to work through its queue.
    drain_seconds = 10.0
    #: ``on_iteration`` is sent when the run's total iteration count is a multiple of this (0: never).
    every = 1
    #: Event name -> registry keys (wildcards allowed) copied into that event's ``read``; assign, do not mutate.
    reads: dict = {}

    def __init__(self):
        self.operator = None
        self.values: dict = {}  # the current event's snapshot (see the module docstring)
        self.read: dict = {}  # the current event's copies of the keys named in reads
        self.dropped = 0  # events dropped in the last run because the queue was full
        self._thread = None  # the thread a threaded monitor's events run on

    def __repr__(self):
        return f"<monitor {self.name}>"

    # -- life cycle (training thread) -----------------------------------------------------------
    def attach(self, operator) -> None:
        """Called once on the training thread when a run starts, before any event."""
        if self.operator is not None and self.operator is not operator:
            raise MonitorError(f"monitor {self.name!r} is already attached to another operator")
        self.operator = operator

    def detach(self) -> None:
        """Called when the run has ended (also after an error), on the thread the events ran on; release files here."""
        self.operator = None

    # -- events ------------------------------------------------------------------------------------
    def on_start(self) -> None: ...

    def on_iteration(self) -> None: ...

    def on_epoch(self, report) -> None:
        """``report`` is the :class:`~sigma_core.operators.EpochReport` of the epoch just ended."""

    def on_pause(self) -> None: ...

    def on_resume(self) -> None: ...

    def on_reset(self) -> None: ...

    def on_stop(self) -> None: ...

    # -- reading and steering ------------------------------------------------------------------------
    @property
    def registry(self):
        """The run's live registry, refreshed now (training thread only: threaded monitors read ``values``)."""
        if threading.current_thread() is self._thread:
            raise MonitorError(f"monitor {self.name!r} is threaded: read self.values (and name registry keys "
                               "in reads), not the live registry")
        return self._attached().registry

    @property
    def trainer(self):
        return self._attached().trainer

    def command(self, name: str, **arguments):
        """Send a command to the operator (any thread): see :meth:`SingleWorkerOperator.command`."""
        return self._attached().command(name, **arguments)

    def _attached(self):
        if self.operator is None:
            raise MonitorError(f"monitor {self.name!r} is not attached to an operator")
        return self.operator


def overrides(monitor: Monitor, event: str) -> bool:
    """Whether ``monitor`` implements ``event`` itself (so sending it is worth the time)."""
    return getattr(type(monitor), event, None) is not getattr(Monitor, event)


def snapshot(trainer, started: float) -> dict:
    """What every event's ``values`` holds: wall-clock ``time`` and the registry's scalars, by their names.

    ``started`` is the run's ``perf_counter`` start (for ``runtime``).
    """
    optimiser = trainer.optimiser
    return {"time": time.time(), "runtime": time.perf_counter() - started, "epoch": trainer.epoch,
            "iteration": trainer.iteration, "total_iterations": trainer.total_iterations,
            "optimiser.cost_total": float(trainer.last_cost),
            "optimiser.learning_rate": float(optimiser.learning_rate), "optimiser.step": optimiser.steps}


class Channel:
    """Delivers one monitor's events for one run: inline, or through a bounded queue on the monitor's own thread."""

    def __init__(self, monitor: Monitor, on_failure):
        self.monitor, self.on_failure = monitor, on_failure  # on_failure(monitor, why), from either thread
        self.failed = self.abandoned = False
        self._events = collections.deque()
        self._ready = threading.Condition(threading.Lock())
        monitor.dropped, thread = 0, None
        if monitor.threaded and any(overrides(monitor, event) for event in EVENTS):
            thread = threading.Thread(target=self._serve, daemon=True, name=f"sigma-monitor-{monitor.name}")
            monitor._thread = thread
            thread.start()
        self._thread = thread

    def send(self, event: str, arguments: tuple, values: dict, read: dict) -> None:
        """Deliver now (inline) or queue (threaded); never waits for a threaded monitor."""
        if self.failed:
            return
        if self._thread is None:
            self._call(event, arguments, values, read)
            return
        events = self._events
        with self._ready:
            if len(events) >= self.monitor.queue_size:
                self.monitor.dropped += 1
                if events[0][0] == "on_iteration":
                    events.popleft()
                else:
                    oldest = next((i for i, queued in enumerate(events) if queued[0] == "on_iteration"), None)
                    if oldest is None:
                        return
                    del events[oldest]
            events.append((event, arguments, values, read))
            if len(events) == 1:  # the thread waits only on an empty queue
                self._ready.notify()

    def close(self) -> None:
        """End the run for this monitor: detach it, after a threaded one has worked through its queue."""
        monitor = self.monitor
        if self._thread is None:
            if not self.failed:
                self._detach()
        else:
            with self._ready:
                self._events.append(None)
                self._ready.notify()
            self._thread.join(monitor.drain_seconds)
            if self._thread.is_alive():
                self.abandoned = True  # its thread detaches it once the current call returns
                log.warning("monitor %r still busy %s s after the run ended; %d events left undelivered",
                            monitor.name, monitor.drain_seconds, len(self._events) - 1)
        if monitor.dropped:
            log.warning("monitor %r could not keep up: %d events dropped", monitor.name, monitor.dropped)

    def _serve(self) -> None:
        try:
            while True:
                with self._ready:
                    if not self._events:
                        self._ready.wait_for(lambda: self._events)
                    item = self._events.popleft()
                if item is None or self.abandoned or not self._call(*item):
                    return
                if not self._events:  # caught up: let events gather, so that waking this thread
                    time.sleep(NAP_SECONDS)  # (which costs the training thread too) happens per batch
        finally:
            self._detach()

    def fail(self, event: str, error: Exception) -> None:
        """The monitor (or reading the registry for it) raised: report it; an inline monitor is detached now."""
        self.failed = True
        self.on_failure(self.monitor, f"{event}: {type(error).__name__}: {error}")
        if self._thread is None:
            self._detach()

    def _call(self, event: str, arguments: tuple, values: dict, read: dict) -> bool:
        self.monitor.values, self.monitor.read = values, read
        try:
            getattr(self.monitor, event)(*arguments)
            return True
        except Exception as error:
            self.fail(event, error)
            return False

    def _detach(self) -> None:
        if self.monitor._thread is not self._thread:  # abandoned, and a new run has the monitor by now
            return
        try:
            self.monitor.detach()
        except Exception as error:
            log.debug("monitor %r failed to detach: %s", self.monitor.name, error)
        finally:
            self.monitor._thread = None


def parse_monitor_option(text: str) -> dict:
    """``"metrics:every=10,values=['epoch']"`` -> ``{"type": "metrics", "every": 10, ...}`` (``--monitor``).

    Values are read as TOML values, as ``--set`` reads them, and otherwise as strings.
    """
    from .config import parse_value

    name, _, rest = text.partition(":")
    if not name.strip():
        raise MonitorError(f"--monitor {text!r}: expected NAME or NAME:key=value,...")
    spec = {"type": name.strip()}
    for item in filter(None, _split_top_level(rest)):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise MonitorError(f"--monitor {text!r}: {item!r} is not key=value")
        spec[key.strip()] = parse_value(value)
    return spec


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes (so lists survive)."""
    parts, depth, quote, current = [], 0, None, []
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    parts.append("".join(current).strip())
    return parts

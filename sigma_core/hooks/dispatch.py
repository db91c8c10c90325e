"""The one dispatcher: delivers a loop's events to its hooks, inline or through a queue on a hook's thread.

The loop calls :meth:`Dispatcher.start` when a run starts, :meth:`~Dispatcher.emit` once per event and
:meth:`~Dispatcher.close` when the run ends, also after an error (as ``fit`` calls Keras' ``CallbackList``).
An event goes only to the hooks that override it and whose ``every`` is due (iterations count the run's
``total_iterations``, epochs the epochs done): inline hooks first, in order, then threaded hooks, which get a
copy of the values as the inline hooks left them, each event (past ``queue_size`` through a spool file) unless
``lossy``. Every call into a hook is guarded here, so that a hook's failure is that hook's alone.
"""

import collections
import contextlib
import logging
import pickle
import sys
import threading
import time

from sigma_core.errors import SigmaError
from sigma_core.hooks.base import EVENTS, Hook, HookError, check, could_be_ctrl_c, failure, overrides, schedule
from sigma_core.hooks.spool import Spool
from sigma_core.hooks.values import RunView, epoch_values

log = logging.getLogger("sigma")

#: How long an idle hook thread lets events gather before it waits to be woken (latency for throughput).
NAP_SECONDS = 0.01
#: Processor time a hook's thread may use in one go before it rests to keep to its share (see :class:`Throttle`).
SLICE_SECONDS = 0.001
SPOOLED = object()  # what a channel's queue holds for an event that waits in its spool file
#: Each event's (inline, threaded) listeners while no run is on.
_NOBODY = dict.fromkeys(EVENTS, ((), ()))

_serving: dict[int, "Channel"] = {}  # id(hook) -> the channel delivering its events now


class Dispatcher:
    """The hooks of one loop and, during a run, who gets which event."""

    def __init__(self):
        self.hooks: list[Hook] = []
        #: One line per hook detached after an error, over this dispatcher's runs.
        self.failures: list[HookFailure] = []
        self.view: RunView | None = None  # the run's live view, while a run is on
        self.calling: Hook | None = None  # the inline hook called now (sigma train interrupts one that holds a stop)
        self._listeners = _NOBODY  # event -> (inline, threaded) (hook|channel, interval) pairs
        self._inline: list[Hook] = []  # attached inline hooks, in order
        self._channels: list[Channel] = []

    def attach(self, *hooks: Hook) -> None:
        """Add hooks for the next run (not during one); a bad ``every``, ``queue_size``, ... is refused now."""
        if self.view is not None:
            raise HookError("attach hooks before the run starts")
        for hook in hooks:
            if not isinstance(hook, Hook):
                raise HookError(f"{hook!r} is not a hook (a sigma_core.Hook subclass)")
            check(hook)
        self.hooks.extend(hooks)

    def start(self, loop, started: float | None = None) -> None:
        """Attach every hook, in ``order``, to a new run of ``loop`` (a :class:`~sigma_core.training.loop.Loop`).

        A hook whose ``attach`` raises a :class:`SigmaError` (or what may be Ctrl-C) ends the run before it
        starts, after detaching those attached before it; anything else detaches only that hook.
        """
        self.view = view = RunView(loop, started)
        try:
            for hook in sorted(self.hooks, key=lambda h: h.order):
                hook.run = view
                try:
                    hook.attach(view)
                except BaseException as error:
                    if isinstance(error, SigmaError) or could_be_ctrl_c(error):
                        raise
                    self._drop(hook, "attach", error)
                    continue
                if hook.threaded and any(overrides(hook, event) for event in EVENTS):
                    self._channels.append(Channel(hook, self))
                else:
                    self._inline.append(hook)
        except BaseException:
            self.close()
            raise
        self._listen()

    def emit(self, event: str, **arguments) -> None:
        """Deliver ``event`` (``"iteration"``, ``"epoch"`` with ``report=...``, ...) to the hooks that want it now."""
        inline, threaded = self._listeners[event]
        if not (inline or threaded):
            return
        if event == "iteration" or event == "epoch":
            count = getattr(self.view.loop.trainer, "total_iterations" if event == "iteration" else "epoch")
            inline = [hook for hook, interval in inline if count % interval == 0]
            threaded = [channel for channel, interval in threaded if count % interval == 0 and not channel.failed]
            if not (inline or threaded):
                return
        else:
            inline, threaded = [hook for hook, _ in inline], [channel for channel, _ in threaded if not channel.failed]
        values = self.view.at(event, epoch_values(arguments["report"]) if event == "epoch" else {})
        method = f"on_{event}"
        for hook in inline:
            self.calling = hook
            try:
                getattr(hook, method)(**arguments)
            except BaseException as error:
                if isinstance(error, SigmaError) or could_be_ctrl_c(error):
                    raise
                self._drop(hook, method, error)
        self.calling = None
        if threaded:
            copy = values.copy()
            for channel in threaded:
                try:
                    reads = channel.hook.reads.get(method)
                    mine = values.copy(reads) if reads else copy
                except Exception as error:  # e.g. a bad pattern: that hook's failure, not the run's
                    channel.fail(method, error)
                    continue
                channel.send((method, arguments, event, mine._items))

    def close(self) -> None:
        """End the run: let threaded hooks work through their queues, detach every hook (last attached first)."""
        channels, inline = self._channels, self._inline
        self._listeners, self._channels, self._inline, self.view, self.calling = _NOBODY, [], [], None, None
        for channel in channels:
            channel.close()
        for hook in reversed(inline):  # the first attached (Ctrl-C's handler) goes last
            self._detach(hook)
        failed = {id(channel.hook) for channel in channels if channel.failed}
        self.hooks = [hook for hook in self.hooks if id(hook) not in failed]

    def _listen(self) -> None:
        """Who gets each event: the hooks that override it, each with the interval its ``every`` sets for it."""
        def due(targets, event):
            return tuple((target, n) for target, hook in targets if overrides(hook, event)
                         and (n := dict(zip(("iteration", "epoch"), schedule(hook))).get(event, 1)))

        inline, threaded = [(hook, hook) for hook in self._inline], [(c, c.hook) for c in self._channels]
        self._listeners = {event: (due(inline, event), due(threaded, event)) for event in EVENTS}

    def _drop(self, hook: Hook, where: str, error: BaseException) -> None:
        """A hook raised on the training thread: report it, send it no more events, and detach it."""
        self._report(hook, where, error)
        self.hooks = [h for h in self.hooks if h is not hook]
        self._inline = [h for h in self._inline if h is not hook]
        self._listen()
        self._detach(hook, quiet=True)

    def _report(self, hook: Hook, where: str, error: BaseException, then="; detached, training goes on") -> None:
        """One line naming the hook that failed (on either thread); training goes on."""
        why = failure(where, error)
        log.warning("hook %r failed in %s%s", hook.name, why, then)
        self.failures.append(HookFailure(hook.name, why))

    def _detach(self, hook: Hook, quiet: bool = False) -> None:
        """Call ``hook.detach()``, reporting a failure there unless ``quiet`` (a hook's failure is one line)."""
        try:
            hook.detach()
        except BaseException as error:
            if could_be_ctrl_c(error):
                raise
            if not quiet:
                self._report(hook, "detach", error, then="")  # the run is over already


class HookFailure(str):
    """A hook that failed and was detached, as the line reported (``hook 'web' failed in on_epoch: OSError: ...``),
    with the hook's name (``hook``) and what it was doing (``event``): ``sigma train``'s summary names it."""

    def __new__(cls, hook: str, why: str):
        line = super().__new__(cls, f"hook {hook!r} failed in {why}")
        line.hook, line.event = hook, why.partition(":")[0]
        return line


class Channel:
    """Delivers one threaded hook's events for one run, in order, on the hook's own thread, through its spool."""

    def __init__(self, hook: Hook, dispatcher: Dispatcher):
        self.hook, self.dispatcher, self.live = hook, dispatcher, dispatcher.view
        self.failed = self.abandoned = False
        self.throttle = Throttle(hook.share) if hook.share < 1 else None
        self._events = collections.deque()  # events, SPOOLED for each in the spool, None at the end
        self._spool = Spool(self.live, f"{hook.name}-{id(self):x}.pickle")
        self._lock = threading.Lock()  # taken as such where it is per event: Condition's own ``with`` is Python code
        self._ready = threading.Condition(self._lock)
        hook.dropped = 0
        _serving[id(hook)] = self
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"sigma-hook-{hook.name}")
        self._thread.start()

    def send(self, item: tuple) -> None:
        """Queue ``(method, arguments, event, the hook's copy of the values)`` (its thread makes the view); never
        waits. Past ``queue_size`` events in memory, a lossy hook drops its oldest iteration event (or this one)."""
        events = self._events
        with self._lock:
            if self.failed:  # read under the lock: its thread closes the spool under it once failed
                return
            behind = len(events) - self._spool.waiting >= self.hook.queue_size  # in memory
            if behind and self.hook.lossy:
                self.hook.dropped += 1
                oldest = next((i for i, queued in enumerate(events) if queued[0] == "on_iteration"), None)
                if oldest is None:
                    return
                del events[oldest]
            elif behind:  # to the spool; an event holding a value no file can hold waits in memory
                with contextlib.suppress(pickle.PicklingError, TypeError, AttributeError):
                    self._spool.put(item)
                    item = SPOOLED
            events.append(item)
            if len(events) == 1:  # the thread waits only on an empty queue
                self._ready.notify()

    def close(self) -> None:
        """Wait up to the hook's ``drain_seconds`` for its queue to empty; its thread detaches it."""
        hook = self.hook
        if self.throttle is not None:
            self.throttle.draining = True  # training is over: the hook may have the whole interpreter
        with self._ready:
            self._events.append(None)
            self._ready.notify()
        self._thread.join(min(hook.drain_seconds, threading.TIMEOUT_MAX))
        if self._thread.is_alive():
            self.abandoned = True  # its thread detaches it once the current call returns
            if self.throttle is not None:
                self.throttle.draining = False  # what runs next in this process is not to wait for it either
            log.warning("hook %r still busy %s s after the run ended; %d events left undelivered",
                        hook.name, hook.drain_seconds, len(self._events) - 1)
        if hook.dropped and not self.failed:  # a failed hook's line says enough
            log.warning("hook %r could not keep up: %d events dropped", hook.name, hook.dropped)

    def fail(self, method: str, error: BaseException) -> None:
        self.failed = True
        self.dispatcher._report(self.hook, method, error)

    def _serve(self) -> None:
        """The hook's thread: its events in order, each paced by the throttle (installed only around the hook's own
        code, so that it never rests holding this channel's lock); anything one raises, ``SystemExit`` included,
        fails the hook. Detaches it at the end."""
        try:
            while True:
                with self._ready:
                    self._ready.wait_for(lambda: self._events)
                    item = self._events.popleft()
                    if item is SPOOLED:  # it comes back from the file
                        item = self._spool.get()
                if item is None or self.abandoned:
                    return
                method, arguments, event, items = item
                self.hook.run = self.live.for_thread(event, items, self.hook.name)
                throttle = self.throttle if sys.getprofile() is None else None  # a profiler has precedence
                paced, began = throttle is not None and not throttle.light.get(method), time.thread_time()
                if paced:
                    throttle.rested()  # it waited for this event
                    sys.setprofile(throttle)
                try:
                    getattr(self.hook, method)(**arguments)
                except BaseException as error:  # on this thread even a KeyboardInterrupt is the hook's own
                    self.fail(method, error)
                    return
                finally:
                    if paced:
                        sys.setprofile(None)
                if throttle is not None:
                    throttle.light[method] = time.thread_time() - began < SLICE_SECONDS
                if not self._events:  # caught up: let events gather, so that waking this thread
                    time.sleep(NAP_SECONDS)  # (which costs the training thread too) happens per batch
        finally:
            with self._ready:
                self._spool.close()
            if _serving.get(id(self.hook)) is self:  # else abandoned, and a new run has the hook by now
                del _serving[id(self.hook)]
                self.dispatcher._detach(self.hook, quiet=self.failed)


class Throttle:
    """Keeps a threaded hook's thread to its ``share`` of the interpreter while training runs.

    Training gives up the interpreter lock in every NumPy call and waits up to 5 ms to get it back from a busy
    thread: a hook computing in Python for a second per event made training four to six times slower
    (``benchmarks/monitor_overhead.py``, ``busy``). As the thread's profile function (:func:`sys.setprofile`), it
    sleeps to keep to ``share`` once the thread has used :data:`SLICE_SECONDS` of processor time since its last
    rest; waiting uses no processor time, and while the run's end waits for the queue (``draining``) it never rests.
    A method whose last call took less than a slice runs without it (``light``): it would double that call's cost.
    """

    def __init__(self, share: float):
        self.rest = SLICE_SECONDS * (1 - share) / share
        self.draining = False
        self.light = {}  # event method -> whether its last call took less than a slice
        self._calls = 0
        self.rested()

    def rested(self) -> None:
        """The thread has just waited or slept: it may run another slice."""
        self._until = time.thread_time() + SLICE_SECONDS

    def __call__(self, frame, event, argument) -> None:
        self._calls += 1
        if self._calls % 64 or time.thread_time() < self._until:  # the clock is a system call: read it seldom
            return
        if not self.draining:
            time.sleep(self.rest)
        self.rested()

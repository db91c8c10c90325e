"""The one dispatcher: delivers a loop's events to its hooks, inline or through a bounded queue on a hook's thread.

The loop owns one :class:`Dispatcher` and calls three methods (as Keras'
``CallbackList`` is called by ``fit``):

``start(loop)``          when a run starts: attaches every hook (in ``order``), starts threaded hooks' threads
``emit(event, **args)``  once per event (:data:`~sigma_core.hooks.base.EVENTS`), e.g. ``emit("epoch", report=r)``
``close()``              when the run ends, also after an error: drains threaded hooks, detaches every hook

``loop`` is anything with ``trainer``, ``epochs`` and ``command(name, **arguments)``.
An event is delivered only to the hooks that override it and whose ``every``
is due (iterations count the run's ``total_iterations``, epochs the epochs
done), inline hooks first, in order, then threaded hooks, which get a copy of
the values as the inline hooks left them. See :mod:`sigma_core.hooks.base`
for the protocol, its threads and its failures: this module is where every
call into a hook is guarded, so that a hook's failure is that hook's alone.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import time

from ..errors import SigmaError, describe
from .base import EVENTS, Hook, HookError, check, could_be_ctrl_c, failure, overrides, schedule
from .values import RunView, epoch_values

log = logging.getLogger("sigma")

#: How long an idle hook thread lets events gather before it waits to be woken (latency for throughput).
NAP_SECONDS = 0.01
#: Processor time a hook's thread may use in one go before it rests to keep to its share (see :class:`Throttle`).
SLICE_SECONDS = 0.001

_serving: dict[int, Channel] = {}  # id(hook) -> the channel delivering its events now


class Dispatcher:
    """The hooks of one loop and, during a run, who gets which event."""

    def __init__(self, hooks=()):
        self.hooks: list[Hook] = []
        #: One line per hook detached after an error, over this dispatcher's runs.
        self.failures: list[HookFailure] = []
        self.view: RunView | None = None  # the run's live view, while a run is on
        self._listeners = {event: ((), ()) for event in EVENTS}  # event -> (inline, threaded) (hook|channel, interval)
        self._inline: list[Hook] = []  # attached inline hooks, in order
        self._channels: list[Channel] = []
        self._failed: list[Hook] = []  # hooks detached after an error in this run
        self.attach(*hooks)

    def attach(self, *hooks: Hook) -> None:
        """Add hooks for the next run (not during one)."""
        if self.view is not None:
            raise HookError("attach hooks before the run starts")
        for hook in hooks:
            if not isinstance(hook, Hook):
                raise HookError(f"{hook!r} is not a hook (a sigma_core.Hook subclass)")
            check(hook)  # refuse a bad every, queue_size, ... now, naming the hook
        self.hooks.extend(hooks)

    # -- a run ------------------------------------------------------------------------------------------
    def start(self, loop, started: float | None = None) -> RunView:
        """Attach every hook to a new run of ``loop`` and start the threads of threaded ones; returns the view.

        A hook whose ``attach`` raises a :class:`SigmaError` (or what may be Ctrl-C) ends the run before it
        starts, after detaching those attached before it; anything else detaches only that hook.
        """
        self.view = view = RunView(loop, started)
        self._inline, self._channels = [], []
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
                    self._channels.append(Channel(hook, self._report))
                else:
                    self._inline.append(hook)
        except BaseException:
            self.close()
            raise
        self._listen()
        return view

    def emit(self, event: str, **arguments) -> None:
        """Deliver ``event`` (``"iteration"``, ``"epoch"`` with ``report=...``, ...) to the hooks that want it now."""
        inline, threaded = self._listeners[event]
        if not (inline or threaded):
            return
        if event == "iteration" or event == "epoch":
            trainer = self.view.loop.trainer
            count = trainer.total_iterations if event == "iteration" else trainer.epoch
            inline = [hook for hook, interval in inline if count % interval == 0]
            threaded = [channel for channel, interval in threaded if count % interval == 0]
            if not (inline or threaded):
                return
        else:
            inline, threaded = [hook for hook, _ in inline], [channel for channel, _ in threaded]
        values = self.view.at(event, epoch_values(arguments["report"]) if event == "epoch" else {})
        method = f"on_{event}"
        for hook in inline:
            try:
                getattr(hook, method)(**arguments)
            except BaseException as error:
                if isinstance(error, SigmaError) or could_be_ctrl_c(error):
                    raise
                self._drop(hook, method, error)
        if threaded:
            copy = values.copy()
            for channel in threaded:
                if channel.failed:
                    continue
                try:
                    reads = channel.hook.reads.get(method)
                    mine = values.copy(reads) if reads else copy
                except Exception as error:  # e.g. a bad pattern: that hook's failure, not the run's
                    channel.fail(method, error)
                    continue
                channel.send(method, arguments, self.view.for_thread(mine, channel.hook.name))

    def close(self) -> None:
        """End the run: let threaded hooks work through their queues, detach every hook (last attached first)."""
        channels, inline = self._channels, self._inline
        self._listeners = {event: ((), ()) for event in EVENTS}
        self._channels, self._inline, self.view = [], [], None
        for channel in channels:
            channel.close()
        for hook in reversed(inline):  # the reverse of attaching: the first attached (Ctrl-C's handler) goes last
            detach(hook, self._report)
        failed = {id(hook) for hook in self._failed} | {id(channel.hook) for channel in channels if channel.failed}
        self.hooks = [hook for hook in self.hooks if id(hook) not in failed]
        self._failed = []

    # -- bookkeeping --------------------------------------------------------------------------------------
    def _listen(self) -> None:
        """Who gets each event: the hooks that override it, each with the interval its ``every`` sets for it."""
        def interval(hook, event):
            return {"iteration": schedule(hook)[0], "epoch": schedule(hook)[1]}.get(event, 1)

        self._listeners = {event: (
            tuple((hook, n) for hook in self._inline if overrides(hook, event) and (n := interval(hook, event))),
            tuple((channel, n) for channel in self._channels
                  if overrides(channel.hook, event) and (n := interval(channel.hook, event))),
        ) for event in EVENTS}

    def _drop(self, hook: Hook, where: str, error: BaseException) -> None:
        """A hook raised on the training thread: report it, stop sending it events, and detach it."""
        self._report(hook, failure(where, error))
        self._failed.append(hook)
        if hook in self._inline:
            self._inline = [h for h in self._inline if h is not hook]
            self._listen()
        detach(hook)

    def _report(self, hook: Hook, why: str, during_run: bool = True) -> None:
        """A hook failed (on the training thread or its own): one line naming it; training goes on."""
        then = "; detached, training goes on" if during_run else ""  # in detach, the run is over already
        log.warning("hook %r failed in %s%s", hook.name, why, then)
        self.failures.append(HookFailure(hook.name, why))


class HookFailure(str):
    """A hook that failed and was detached, as the line reported (``hook 'web' failed in on_epoch: OSError: ...``),
    with the hook's name (``hook``) and what it was doing (``event``) for a run's summary: ``sigma train``'s last
    line and ``--out`` name it, and ``--strict`` makes its exit status non-zero."""

    def __new__(cls, hook: str, why: str):
        line = super().__new__(cls, f"hook {hook!r} failed in {why}")
        line.hook, line.event = hook, why.partition(":")[0]
        return line


def detach(hook: Hook, report=None) -> None:
    """Call ``hook.detach()``; a failure there is reported through ``report`` (a :meth:`Dispatcher._report`), or
    quietly without one: a hook detached because it failed is reported once, for that failure."""
    try:
        hook.detach()
    except BaseException as error:
        if could_be_ctrl_c(error):
            raise
        if report is None:
            log.debug("hook %r failed to detach: %s", hook.name, describe(error))
        else:
            report(hook, failure("detach", error), during_run=False)


class Channel:
    """Delivers one threaded hook's events for one run, through a bounded queue, on the hook's own thread."""

    def __init__(self, hook: Hook, report):
        self.hook, self.report = hook, report  # Dispatcher._report, from either thread
        self.failed = self.abandoned = False
        self.throttle = Throttle(hook.share) if hook.share < 1 else None
        self._events = collections.deque()
        self._ready = threading.Condition(threading.Lock())
        hook.dropped = 0
        _serving[id(hook)] = self
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"sigma-hook-{hook.name}")
        self._thread.start()

    def send(self, method: str, arguments: dict, view: RunView) -> None:
        """Queue an event; never waits. A full queue drops its oldest iteration event (or, with none, this one)."""
        if self.failed:
            return
        events = self._events
        with self._ready:
            if len(events) >= self.hook.queue_size:
                self.hook.dropped += 1
                if events[0][0] == "on_iteration":
                    events.popleft()
                else:
                    oldest = next((i for i, queued in enumerate(events) if queued[0] == "on_iteration"), None)
                    if oldest is None:
                        return
                    del events[oldest]
            events.append((method, arguments, view))
            if len(events) == 1:  # the thread waits only on an empty queue
                self._ready.notify()

    def close(self) -> None:
        """End the run for this hook: wait up to its ``drain_seconds`` for the queue to empty; its thread detaches it."""
        hook = self.hook
        if self.throttle is not None:
            self.throttle.draining = True  # training is over: the hook may have the whole interpreter
        with self._ready:
            self._events.append(None)
            self._ready.notify()
        self._thread.join(hook.drain_seconds)
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
        self.report(self.hook, failure(method, error))

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

    def _call(self, method: str, arguments: dict, view: RunView) -> bool:
        """The hook's event, paced by the throttle (installed only around the hook's own code, so that it never
        rests holding this channel's lock); anything it raises, ``SystemExit`` included, fails it."""
        self.hook.run = view
        paced = self.throttle is not None and sys.getprofile() is None  # a profiler of this thread has precedence
        if paced:
            self.throttle.rested()  # it waited for this event
            sys.setprofile(self.throttle)
        try:
            getattr(self.hook, method)(**arguments)
            return True
        except BaseException as error:  # on this thread even a KeyboardInterrupt is the hook's own
            self.fail(method, error)
            return False
        finally:
            if paced:
                sys.setprofile(None)

    def _detach(self) -> None:
        if _serving.get(id(self.hook)) is not self:  # abandoned, and a new run has the hook by now
            return
        try:
            detach(self.hook, None if self.failed else self.report)
        finally:
            _serving.pop(id(self.hook), None)


class Throttle:
    """Keeps a threaded hook's thread to its ``share`` of the interpreter while training runs.

    Python threads take turns holding one interpreter lock. Training lets go of
    it in every NumPy or BLAS call, and to get it back it waits for a busy
    thread up to the switch interval (5 ms), time after time: a threaded hook
    that computed in Python for a second per event made training four to six
    times slower (``benchmarks/monitor_overhead.py``, ``busy``), however few
    events it was given. This is the hook thread's profile function
    (:func:`sys.setprofile`, called at each function call and return of the
    hook's code, on its thread only): once the thread has used
    :data:`SLICE_SECONDS` of processor time since it last rested, it sleeps
    long enough to keep to ``share``, and training has the lock meanwhile.

    Waiting (for events, a disk, the network) uses no processor time, so a hook
    that mostly waits is never held back, and while the end of the run waits
    for its queue (``draining``) the hook has the interpreter to itself; one
    still busy after that is held to its share again. What it cannot pause:
    one long call into C code that does not call back into Python. What it
    may do: rest holding a lock of the hook's (a log handler's, the loop's
    while sending a command), which training then waits for, a rest at most
    (19 ms at the default share).
    """

    def __init__(self, share: float):
        self.rest = SLICE_SECONDS * (1 - share) / share
        self.draining = False
        self._calls = 0
        self._until = 0.0
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

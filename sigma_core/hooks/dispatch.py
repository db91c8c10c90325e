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
for the protocol, its threads and its failures.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from ..errors import SigmaError, describe
from .base import EVENTS, Hook, HookError, overrides, schedule
from .values import RunView, epoch_values

log = logging.getLogger("sigma")

#: How long an idle hook thread lets events gather before it waits to be woken (latency for throughput).
NAP_SECONDS = 0.01

_serving: dict[int, Channel] = {}  # id(hook) -> the channel delivering its events now


class Dispatcher:
    """The hooks of one loop and, during a run, who gets which event."""

    def __init__(self, hooks=()):
        self.hooks: list[Hook] = []
        #: One line per hook detached after an error, over this dispatcher's runs.
        self.failures: list[str] = []
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
            schedule(hook)  # refuse a bad every now, naming the hook
        self.hooks.extend(hooks)

    # -- a run ------------------------------------------------------------------------------------------
    def start(self, loop, started: float | None = None) -> RunView:
        """Attach every hook to a new run of ``loop`` and start the threads of threaded ones; returns the view.

        A hook whose ``attach`` raises a :class:`SigmaError` ends the run before it starts (after
        detaching those attached before it); any other exception detaches only that hook.
        """
        self.view = view = RunView(loop, started)
        self._inline, self._channels = [], []
        try:
            for hook in sorted(self.hooks, key=lambda h: h.order):
                hook.run = view
                try:
                    hook.attach(view)
                except SigmaError:
                    raise
                except Exception as error:
                    self._report(hook, f"attach: {describe(error)}")
                    self._failed.append(hook)
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
            except SigmaError:
                raise
            except Exception as error:
                self._drop(hook, f"{method}: {describe(error)}")
        if threaded:
            copy = values.copy()
            for channel in threaded:
                if channel.failed:
                    continue
                reads = channel.hook.reads.get(method)
                try:
                    mine = values.copy(reads) if reads else copy
                except Exception as error:  # e.g. a bad pattern: that hook's failure, not the run's
                    channel.fail(method, error)
                    continue
                channel.send(method, arguments, self.view.for_thread(mine, channel.hook.name))

    def close(self) -> None:
        """End the run: let threaded hooks work through their queues, detach every hook."""
        channels, inline = self._channels, self._inline
        self._listeners = {event: ((), ()) for event in EVENTS}
        self._channels, self._inline, self.view = [], [], None
        for channel in channels:
            channel.close()
        for hook in inline:
            try:
                hook.detach()
            except Exception as error:
                log.debug("hook %r failed to detach: %s", hook.name, error)
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

    def _drop(self, hook: Hook, why: str) -> None:
        """An inline hook raised: report it, detach it, and stop sending it events."""
        self._report(hook, why)
        self._failed.append(hook)
        self._inline = [h for h in self._inline if h is not hook]
        self._listen()
        try:
            hook.detach()
        except Exception as error:
            log.debug("hook %r failed to detach: %s", hook.name, error)

    def _report(self, hook: Hook, why: str) -> None:
        """A hook failed (on the training thread or its own): one line naming it; training goes on."""
        log.warning("hook %r failed in %s; detached, training goes on", hook.name, why)
        self.failures.append(f"hook {hook.name!r} failed in {why}")


class Channel:
    """Delivers one threaded hook's events for one run, through a bounded queue, on the hook's own thread."""

    def __init__(self, hook: Hook, report):
        self.hook, self.report = hook, report  # report(hook, why), from either thread
        self.failed = self.abandoned = False
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
        with self._ready:
            self._events.append(None)
            self._ready.notify()
        self._thread.join(hook.drain_seconds)
        if self._thread.is_alive():
            self.abandoned = True  # its thread detaches it once the current call returns
            log.warning("hook %r still busy %s s after the run ended; %d events left undelivered",
                        hook.name, hook.drain_seconds, len(self._events) - 1)
        if hook.dropped:
            log.warning("hook %r could not keep up: %d events dropped", hook.name, hook.dropped)

    def fail(self, method: str, error: Exception) -> None:
        self.failed = True
        self.report(self.hook, f"{method}: {describe(error)}")

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
        self.hook.run = view
        try:
            getattr(self.hook, method)(**arguments)
            return True
        except Exception as error:
            self.fail(method, error)
            return False

    def _detach(self) -> None:
        if _serving.get(id(self.hook)) is not self:  # abandoned, and a new run has the hook by now
            return
        try:
            self.hook.detach()
        except Exception as error:
            log.debug("hook %r failed to detach: %s", self.hook.name, error)
        finally:
            _serving.pop(id(self.hook), None)

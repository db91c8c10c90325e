"""Operators run trainers: here the single worker on one thread (data-parallel ones: :mod:`sigma_core.workers`).

Sigma's operators split work across workers and merge their networks; the
single-worker operator is the degenerate case that keeps the same shape: it
owns the run state, the epoch loop, its hooks (training logic, see
:mod:`sigma_core.hooks`) and its monitors (observers with a command channel,
see :mod:`sigma_core.monitors`). Operators are a plugin kind
(``register_operators``); a run file picks one with ``[operator] type = ...``
and every operator is constructed as ``cls(trainer, epochs=..., hooks=...,
monitors=..., **settings)``.

States and signals follow Sigma's workers. :meth:`SingleWorkerOperator.run`
trains on the calling thread, :meth:`~SingleWorkerOperator.start` on a new
one; either way another thread (or a hook) may call ``signal_pause``,
``signal_resume``, ``signal_stop`` and ``signal_reset``. The training loop
acts on them only at iteration and epoch boundaries, because hooks and the
handler are not safe to use from two threads at once, and a half-done
iteration cannot be paused. A paused loop blocks on a condition variable
(no polling) until resumed, stopped or reset. The rules, from Sigma's worker
tests: start while running is ignored, start while paused raises; pause or
resume after stop raises; a repeated stop is ignored. :meth:`~SingleWorkerOperator.command`
is the same channel by name, plus ``step`` (one iteration while paused),
``set`` (an optimiser hyperparameter, applied at the next boundary) and
``call`` (a function run on the training thread at the next boundary, even
while paused: how a dashboard runs inference on the training handler).
:meth:`~SingleWorkerOperator.wait_for_state_changed` waits until the loop
has acted on the last signal, so a caller can tell "asked to pause" from
"paused".

Hooks fire on the operator's events: ``start`` before the first iteration,
``iteration`` after each training step, ``epoch`` after each epoch's
validation, ``pause`` and ``resume`` when the loop blocks and wakes,
``reset`` after the trainer was put back to its initial state, ``stop`` when
the run ends without an error. With one worker, local and global hooks see
the same state; locals run first. Monitors get each event right after the
hooks, inline or on their own threads (see :mod:`sigma_core.monitors`). A
stop or reset signalled during an epoch abandons that epoch after the
current iteration; the interrupted epoch is not reported.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum

import numpy

from .arguments import require, rule_of
from .errors import SigmaError
from .hooks.dispatch import HookDispatcher
from .hooks.timestep import TimeScale
from .monitors import EVENTS, Channel, MonitorError, overrides, snapshot

log = logging.getLogger("sigma")


@dataclass
class EpochReport:
    epoch: int
    cost: float
    seconds: float
    iterations: int
    validation: dict = field(default_factory=dict)  # iterator name -> evaluate() report


class State(str, Enum):
    """An operator's execution state (Sigma's ExecutionState)."""

    NONE = "none"  # never started
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


class _Interrupted(Exception):
    """Unwinds the trainer's epoch loop when a stop or reset was signalled mid-epoch."""


class SingleWorkerOperator:
    """Runs a trainer epoch by epoch until ``epochs`` or until stopped."""

    _step = None  # a training step spread over workers (see sigma_core.workers); None: the trainer's own

    def __init__(self, trainer, *, epochs: int, hooks=(), monitors=()):
        self.trainer = trainer
        self.epochs = int(epochs)
        self.dispatcher = HookDispatcher(self)
        self.dispatcher.attach(*hooks)
        self.monitors = []
        self.monitor_failures: list[str] = []  # one line per monitor detached after an error
        self._listeners = {event: [] for event in EVENTS}  # during a run: event -> channels of monitors that want it
        self._started = 0.0  # perf_counter at the run's start
        self.reports: list[EpochReport] = []
        self.seconds = 0.0
        self._state = State.NONE
        # One lock for the state and the flags below; Condition's default RLock lets a hook
        # (running on the training thread inside the loop) signal without deadlocking.
        self._changed = threading.Condition()
        self._active = False  # a training loop is running (possibly paused)
        self._paused = False  # the loop has fired its pause hooks and is blocked
        self._reset_requested = False
        self._step_requested = False  # run one iteration, then pause again ...
        self._stepped = False  # ... and that iteration has been let through
        self._settings = []  # (key, value) sent by `set` commands, applied on the training thread
        self._calls = []  # (function, Future) sent by `call` commands, run on the training thread
        self._settled = True  # the loop has acted on every signal so far
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        for monitor in monitors:
            self.attach_monitor(monitor)

    @property
    def state(self) -> State:
        """The state last signalled; the loop reaches it at its next boundary."""
        return self._state

    @property
    def hooks(self) -> list:
        """Attached hooks, including those attached because others require them."""
        return list(self.dispatcher.hooks)

    def attach_hook(self, *hooks) -> list:
        """Attach hooks (and their requirements); returns those actually added."""
        return self.dispatcher.attach(*hooks)

    def attach_monitor(self, monitor) -> None:
        """Add a monitor before a run starts; each run attaches it at its start and detaches it at its end."""
        if self._active:
            raise MonitorError(f"monitor {monitor.name!r}: attach monitors before the run starts")
        self.monitors.append(monitor)

    @property
    def registry(self):
        """The run's registry (what hooks read), refreshed now; for monitors, on the training thread."""
        if self.dispatcher.publication is None:
            self.dispatcher.publish(self.trainer, time.perf_counter())
        self.dispatcher.publication.refresh()
        return self.dispatcher.publication.registry

    # -- starting and waiting ---------------------------------------------------------------
    def run(self) -> list[EpochReport]:
        """Train on the calling thread until ``epochs`` are done or a stop; returns the epoch reports.

        The calling thread keeps the training loop (and Ctrl-C); use
        :meth:`start` to train in the background instead.
        """
        with self._changed:
            if self._state in (State.RUNNING, State.PAUSED):
                raise SigmaError(f"operator of trainer {self.trainer.name!r} is already {self._state.value}")
            self._begin()
        self._loop()
        return self.reports

    def start(self) -> None:
        """Train on a new thread and return at once; :meth:`join` waits for the end.

        Ignored while running; raises while paused (resume instead). After a
        stop it continues from the trainer's current epoch.
        """
        with self._changed:
            if self._state is State.RUNNING:
                return
            if self._state is State.PAUSED:
                raise SigmaError(f"cannot start the operator of trainer {self.trainer.name!r} while it is "
                                 "paused; resume it instead")
            self._begin()
            self._error = None
            self._thread = threading.Thread(target=self._loop_in_thread, daemon=True,
                                            name=f"sigma-operator-{self.trainer.name}")
            self._thread.start()

    def join(self, timeout: float | None = None) -> list[EpochReport]:
        """Wait for a :meth:`start`-ed run to end; re-raises the exception that ended it, if any."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"operator of trainer {self.trainer.name!r} still running after {timeout} s")
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self.reports

    def wait_for_state_changed(self, timeout: float | None = None) -> bool:
        """Block until the training loop has acted on the last signal; False on timeout.

        After ``signal_pause()`` this returns once the loop is blocked (so the
        parameters stop changing), after ``signal_stop()`` once it has ended.
        """
        with self._changed:
            return self._changed.wait_for(lambda: self._settled, timeout)

    def _begin(self) -> None:
        """Move to running (lock held). A loop still winding down from a stop would race the new one."""
        if self._active:
            raise SigmaError(f"operator of trainer {self.trainer.name!r} is still stopping; "
                             "wait_for_state_changed() before starting it again")
        self._state, self._active, self._paused, self._settled = State.RUNNING, True, False, False
        self._step_requested = self._stepped = False

    # -- signals (any thread) ----------------------------------------------------------------
    def signal_pause(self) -> None:
        """Pause at the next iteration boundary; ignored while paused."""
        with self._changed:
            if self._state is State.PAUSED:
                return
            if self._state is not State.RUNNING:
                raise SigmaError(f"cannot pause the operator of trainer {self.trainer.name!r}: it is "
                                 f"{self._state.value}, not running")
            self._signal(State.PAUSED)

    def signal_resume(self) -> None:
        """Continue a paused run; ignored while running."""
        with self._changed:
            if self._state is State.RUNNING:
                return
            if self._state is not State.PAUSED:
                raise SigmaError(f"cannot resume the operator of trainer {self.trainer.name!r}: it is "
                                 f"{self._state.value}, not paused")
            self._signal(State.RUNNING)

    def signal_stop(self) -> None:
        """End the run after the current iteration (also when paused); ignored when not running."""
        with self._changed:
            if self._state in (State.RUNNING, State.PAUSED):
                self._signal(State.STOPPED)

    def signal_reset(self) -> None:
        """Put the trainer back to its initial parameters and epoch 0 (see :meth:`Trainer.reset`).

        During a run the loop resets at its next boundary and keeps its state
        (a paused run stays paused); otherwise the reset happens now, on the
        calling thread. Either way the ``reset`` hooks fire after it.
        """
        with self._changed:
            if self._active:
                self._reset_requested = True
                self._settled = False
                self._changed.notify_all()
                return
            self._reset()
            self.dispatcher.close()  # no loop will collect background reset hooks

    def command(self, name: str, **arguments) -> None:
        """Steer the run by name, from any thread: what monitors send.

        ``pause``, ``resume``, ``stop`` and ``reset`` are the ``signal_*``
        methods. ``step`` runs one iteration of a paused run and pauses it
        again. ``set`` with ``key="optimiser.<hyperparameter>"`` and a number
        ``value`` changes the optimiser at the next iteration boundary (at
        once when no run is active). ``call`` with ``fn`` returns a
        :class:`~concurrent.futures.Future` of ``fn()``, run on the training
        thread at the next boundary (also while paused; at once, on the calling
        thread, when no run is active); ``fn`` must not wait for the operator.
        Each command is logged as it arrives (``call`` at debug level).
        """
        log.log(logging.DEBUG if name == "call" else logging.INFO, "operator of trainer %s: command %s",
                self.trainer.name, " ".join([name, *(f"{key}={value!r}" for key, value in arguments.items())]))
        simple = {"pause": self.signal_pause, "resume": self.signal_resume,
                  "stop": self.signal_stop, "reset": self.signal_reset}
        if name in simple and not arguments:
            return simple[name]()
        if name == "step" and not arguments:
            with self._changed:
                if self._state is not State.PAUSED:
                    raise SigmaError(f"cannot step the operator of trainer {self.trainer.name!r}: it is "
                                     f"{self._state.value}, not paused")
                self._step_requested = True
                self._signal(State.RUNNING)
            return
        if name == "set" and set(arguments) == {"key", "value"}:
            key, value = arguments["key"], arguments["value"]
            self._check_setting(key, value)
            with self._changed:
                if not self._active:
                    self._apply_settings([(key, value)])
                    return
                self._settings.append((key, value))
                self._settled = False
                self._changed.notify_all()
            return
        if name == "call" and set(arguments) == {"fn"}:
            return self._call(arguments["fn"])
        raise SigmaError(f"unknown command {name!r} with arguments {sorted(arguments)} (commands: pause, resume, "
                         "stop, reset, step, set key=... value=..., call fn=...)")

    def _call(self, fn) -> Future:
        future = Future()
        with self._changed:
            self._calls.append((fn, future))
            if self._active:
                self._settled = False
                self._changed.notify_all()
                return future
            self._run_calls()
        return future

    def _run_calls(self) -> None:
        """Run the functions sent by ``call`` (lock held), handing each result or exception to its future."""
        calls, self._calls = self._calls, []
        for fn, future in calls:
            if not future.set_running_or_notify_cancel():  # the caller gave up waiting
                continue
            try:
                future.set_result(fn())
            except Exception as error:
                future.set_exception(error)

    def _check_setting(self, key, value) -> None:
        optimiser = self.trainer.optimiser
        section, _, attribute = str(key).partition(".")
        known = [name for name, current in optimiser.hyperparameters().items()
                 if isinstance(current, (int, float)) and not isinstance(current, bool)]
        if section != "optimiser" or attribute not in known:
            raise SigmaError(f"set: cannot set {key!r}; settable keys: "
                             f"{', '.join('optimiser.' + name for name in known)}")
        # The same rule a run file's value would be held to (learning_rate >= 0, beta1 in [0, 1), ...).
        parameter = inspect.signature(type(optimiser)).parameters.get(attribute)
        rule = (parameter and rule_of(type(optimiser), attribute, parameter)) or "number"
        try:
            require(key, "number" if rule == "int" else rule, value)
        except SigmaError as error:
            raise SigmaError(f"set: {error}") from None

    def _apply_settings(self, settings) -> None:
        for key, value in settings:
            setattr(self.trainer.optimiser, key.partition(".")[2], value)
            log.info("operator of trainer %s: %s set to %r", self.trainer.name, key, value)

    def _signal(self, state: State) -> None:
        self._state, self._settled = state, False
        self._changed.notify_all()

    # -- the training loop (one thread) -----------------------------------------------------------
    def _loop_in_thread(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # handed to join()
            self._error = error

    def _loop(self) -> None:
        trainer = self.trainer
        start = self._started = time.perf_counter()
        channels = []
        try:
            self.dispatcher.start(trainer, start)
            if self.monitors and self.dispatcher.publication is None:
                self.dispatcher.publish(trainer, start)
            for monitor in self.monitors:
                monitor.attach(self)
                channels.append(Channel(monitor, self._monitor_failed))
            self._listeners = {event: [c for c in channels if overrides(c.monitor, event)] for event in EVENTS}
            self._notify("on_start")
            while True:
                going_on = self._obey_signals(iterated=False)
                if self._take_reset():
                    self._reset()
                    continue
                if not going_on or trainer.epoch >= self.epochs:
                    break
                self._epoch()
            self.dispatcher.event(TimeScale.STOP)
            self._notify("on_stop")
        finally:
            try:
                self.dispatcher.close()
            finally:
                self.seconds = time.perf_counter() - start  # not counting the wait for threaded monitors
                self._listeners = {event: [] for event in EVENTS}
                for channel in channels:
                    channel.close()
                self.monitors = [c.monitor for c in channels if not c.failed] + self.monitors[len(channels):]
                with self._changed:
                    self._state, self._active, self._settled = State.STOPPED, False, True
                    self._run_calls()  # sent too late for the loop: run now, at its end
                    self._changed.notify_all()

    def _epoch(self) -> None:
        trainer = self.trainer
        began = time.perf_counter()
        try:
            cost = trainer.run_epoch(on_iteration=self._on_iteration, step=self._step)
        except _Interrupted:
            return  # the caller's loop acts on the stop or reset; the epoch is not reported
        seconds = time.perf_counter() - began
        validation = {name: trainer.evaluate(iterator) for name, iterator in trainer.validation.items()}
        report = EpochReport(trainer.epoch, cost, seconds, trainer.iteration, validation)
        self.reports.append(report)
        self.dispatcher.event(TimeScale.EPOCH)
        self._notify("on_epoch", report)

    def _on_iteration(self, trainer):
        self.dispatcher.event(TimeScale.ITERATION)
        if self._listeners["on_iteration"]:
            step = trainer.total_iterations
            self._notify("on_iteration", channels=[c for c in self._listeners["on_iteration"]
                                                   if c.monitor.every and step % c.monitor.every == 0])
        # Unlocked reads: a signal that lands just after them is seen at the next boundary.
        if (self._state is not State.RUNNING or self._paused or self._reset_requested or self._step_requested
                or self._settings or self._calls) and not self._obey_signals():
            raise _Interrupted

    def _notify(self, event: str, *arguments, channels=None) -> None:
        """Send ``event`` with a snapshot of the run (see :mod:`sigma_core.monitors`) to the monitors that want it."""
        channels = self._listeners[event] if channels is None else channels
        if not channels:
            return
        values = snapshot(self.trainer, self._started)
        for channel in channels:
            reads = channel.monitor.reads.get(event)
            try:
                read = self._read(reads) if reads else {}
            except Exception as error:  # e.g. a bad pattern: that monitor's failure, not the run's
                channel.fail(event, error)
                continue
            channel.send(event, arguments, values, read)

    def _read(self, patterns) -> dict:
        """Copies of the numbers, strings and arrays (as NumPy arrays) ``patterns`` match, by identifier.

        Anything else (a sub-registry, the trainer) is live, so it is left out.
        """
        publication, copies = self.dispatcher.publication, {}
        publication.refresh()
        for key, value in (match for pattern in patterns for match in publication.resolver.resolve_get(pattern)):
            if hasattr(value, "__array__"):
                copies[key] = numpy.array(value)
            elif isinstance(value, (int, float, str)):
                copies[key] = value
        return copies

    def _monitor_failed(self, monitor, why: str) -> None:
        """A monitor raised (on the training thread or its own): report it once; its channel detaches it."""
        log.warning("monitor %r failed in %s; detached, training goes on", monitor.name, why)
        self.monitor_failures.append(f"monitor {monitor.name!r} failed in {why}")

    def _obey_signals(self, iterated: bool = True) -> bool:
        """Act on signals at a boundary, blocking while paused; False on a pending stop or reset.

        Settings sent by ``set`` are applied and functions sent by ``call`` run here, on the training thread. A
        ``step`` lets one iteration through and then pauses again. Pause and
        resume hooks and monitors run outside the lock, so they may signal too.
        """
        while True:
            with self._changed:
                if self._settings:
                    self._apply_settings(self._settings)
                    self._settings = []
                self._run_calls()
                if self._reset_requested or self._state is State.STOPPED:
                    return False
                if self._state is State.RUNNING and not self._paused:
                    if self._step_requested:
                        if not (self._stepped and iterated):  # one iteration through; settled once it ran
                            self._stepped = True
                            return True
                        self._step_requested = self._stepped = False
                        self._state = State.PAUSED
                        continue
                    self._settle()
                    return True
                if self._state is State.PAUSED and self._paused:
                    self._settle()
                    self._changed.wait()
                    continue
                self._paused = not self._paused  # entering or leaving the pause
                scale = TimeScale.PAUSE if self._paused else TimeScale.RESUME
            self.dispatcher.event(scale)
            self._notify("on_pause" if self._paused else "on_resume")

    def _settle(self) -> None:
        self._settled = True
        self._changed.notify_all()

    def _take_reset(self) -> bool:
        with self._changed:
            requested, self._reset_requested = self._reset_requested, False
            return requested

    def _reset(self) -> None:
        """Reset the trainer, forget its epoch reports, fire the ``reset`` hooks."""
        self.trainer.reset()
        self.reports.clear()
        if self.dispatcher.publication is None:  # reset before any run: hooks need a registry to read
            self.dispatcher.publish(self.trainer, time.perf_counter())
        self.dispatcher.event(TimeScale.RESET)
        self._notify("on_reset")

"""Operators run trainers. For now there is one: a single worker on one thread.

Sigma's operators split work across workers and merge their networks; the
single-worker operator is the degenerate case that keeps the same shape: it
owns the run state, the epoch loop, its observers (progress bars, checkpoint
savers) and its hooks (see :mod:`sigma_core.hooks`).

States and signals follow Sigma's workers. :meth:`SingleWorkerOperator.run`
trains on the calling thread, :meth:`~SingleWorkerOperator.start` on a new
one; either way another thread (or a hook) may call ``signal_pause``,
``signal_resume``, ``signal_stop`` and ``signal_reset``. The training loop
acts on them only at iteration and epoch boundaries, because hooks and the
handler are not safe to use from two threads at once, and a half-done
iteration cannot be paused. A paused loop blocks on a condition variable
(no polling) until resumed, stopped or reset. The rules, from Sigma's worker
tests: start while running is ignored, start while paused raises; pause or
resume after stop raises; a repeated stop is ignored.
:meth:`~SingleWorkerOperator.wait_for_state_changed` waits until the loop
has acted on the last signal, so a caller can tell "asked to pause" from
"paused".

Hooks fire on the operator's events: ``start`` before the first iteration,
``iteration`` after each training step, ``epoch`` after each epoch's
validation, ``pause`` and ``resume`` when the loop blocks and wakes,
``reset`` after the trainer was put back to its initial state, ``stop`` when
the run ends without an error. With one worker, local and global hooks see
the same state; locals run first. A stop or reset signalled during an epoch
abandons that epoch after the current iteration; the interrupted epoch is
not reported.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import Enum

from .errors import SigmaError
from .hooks.dispatch import HookDispatcher
from .hooks.timestep import TimeScale


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

    def __init__(self, trainer, *, epochs: int, observers=(), hooks=()):
        self.trainer = trainer
        self.epochs = int(epochs)
        self.observers = list(observers)  # objects with on_epoch_start/on_iteration/on_epoch_end
        self.dispatcher = HookDispatcher(self)
        self.dispatcher.attach(*hooks)
        self.reports: list[EpochReport] = []
        self.seconds = 0.0
        self._state = State.NONE
        # One lock for the state and the flags below; Condition's default RLock lets a hook
        # (running on the training thread inside the loop) signal without deadlocking.
        self._changed = threading.Condition()
        self._active = False  # a training loop is running (possibly paused)
        self._paused = False  # the loop has fired its pause hooks and is blocked
        self._reset_requested = False
        self._settled = True  # the loop has acted on every signal so far
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

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
        start = time.perf_counter()
        try:
            self.dispatcher.start(trainer, start)
            while True:
                going_on = self._obey_signals()
                if self._take_reset():
                    self._reset()
                    continue
                if not going_on or trainer.epoch >= self.epochs:
                    break
                self._epoch()
            self.dispatcher.event(TimeScale.STOP)
        finally:
            try:
                self.dispatcher.close()
            finally:
                self.seconds = time.perf_counter() - start
                with self._changed:
                    self._state, self._active, self._settled = State.STOPPED, False, True
                    self._changed.notify_all()

    def _epoch(self) -> None:
        trainer = self.trainer
        for observer in self.observers:
            observer.on_epoch_start(trainer, len(trainer.training_iterator))
        began = time.perf_counter()
        try:
            cost = trainer.run_epoch(on_iteration=self._on_iteration)
        except _Interrupted:
            return  # the caller's loop acts on the stop or reset; the epoch is not reported
        seconds = time.perf_counter() - began
        validation = {name: trainer.evaluate(iterator) for name, iterator in trainer.validation.items()}
        report = EpochReport(trainer.epoch, cost, seconds, trainer.iteration, validation)
        self.reports.append(report)
        self.dispatcher.event(TimeScale.EPOCH)
        for observer in self.observers:
            observer.on_epoch_end(trainer, report)

    def _on_iteration(self, trainer):
        for observer in self.observers:
            observer.on_iteration(trainer)
        self.dispatcher.event(TimeScale.ITERATION)
        # Unlocked reads: a signal that lands just after them is seen at the next boundary.
        if (self._state is not State.RUNNING or self._paused or self._reset_requested) \
                and not self._obey_signals():
            raise _Interrupted

    def _obey_signals(self) -> bool:
        """Act on pause and resume at a boundary, blocking while paused; False on a pending stop or reset.

        Pause and resume hooks fire outside the lock, so they may signal too.
        """
        while True:
            with self._changed:
                if self._reset_requested or self._state is State.STOPPED:
                    return False
                if self._state is State.RUNNING and not self._paused:
                    self._settle()
                    return True
                if self._state is State.PAUSED and self._paused:
                    self._settle()
                    self._changed.wait()
                    continue
                self._paused = not self._paused  # entering or leaving the pause
                scale = TimeScale.PAUSE if self._paused else TimeScale.RESUME
            self.dispatcher.event(scale)

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

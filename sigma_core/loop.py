"""The training loop: epochs, iterations, the commands that steer a run, and its events.

:class:`Loop` is the one place a run's epochs and iterations happen. It asks
its :class:`Strategy` (what ``[operator] type = ...`` names) for each
iteration's step, and owns everything around it: the run state, the commands
other threads send, validation at each epoch's end, and the events hooks
(see :mod:`sigma_core.hooks`) receive, each emitted once through :meth:`Loop._emit`.

**Strategies.** An operator is a strategy: how one iteration is computed and
how its results reach the trainer (the global state hooks read and
checkpoints save). The single worker, built in, runs the trainer's own
step. Plugins register more with ``register_operators`` (data-parallel
threads in ``sigmann-threads``, Ray actors in ``sigmann-ray``); a run file's
``[operator]`` table builds one as ``cls(trainer, **settings)``. The loop
calls, on the training thread:

- :meth:`Strategy.setup` when a run starts, before the ``start`` event;
- :meth:`Strategy.step` for every minibatch: train one iteration, count it on
  the trainer and return its cost;
- :meth:`Strategy.merge` where the trainer's state must be whole: at the end
  of every epoch (before validation) and when a stop or reset abandons one;
- :meth:`Strategy.reset` after a ``reset`` put the trainer back to its
  initial state (workers drop their copies of the old one);
- :meth:`Strategy.teardown` when the run ends, also after an error.

**States and commands** follow Sigma's workers. :meth:`Loop.run` trains on the
calling thread, :meth:`Loop.start` on a new one; either way another thread (or
a hook) may call ``signal_pause``, ``signal_resume``, ``signal_stop`` and
``signal_reset``. The loop acts on them only at iteration and epoch
boundaries, because hooks and the handler are not safe to use from two
threads at once, and a half-done iteration cannot be paused. A paused loop
blocks on a condition variable (no polling) until resumed, stopped or reset.
The rules, from Sigma's worker tests: start while running is ignored, start
while paused raises; pause or resume after stop raises; a repeated stop is
ignored. :meth:`Loop.command` is the same channel by name, plus ``step`` (one
iteration while paused), ``extend`` (train more epochs), ``set`` (an optimiser
hyperparameter) and ``call`` (a function run on the training thread at the
next boundary, even while paused: how a dashboard runs inference on the
training handler). :meth:`Loop.wait_for_state_changed` waits until the loop
has acted on the last signal, so a caller can tell "asked to pause" from
"paused".

**Events.** ``start`` before the first iteration, ``iteration`` after each
training step, ``epoch`` after each epoch's validation, ``pause`` and
``resume`` when the loop blocks and wakes, ``reset`` after the trainer was
put back to its initial state, ``stop`` when the run ends without an error.
A stop or reset signalled during an epoch abandons that epoch after the
current iteration; the interrupted epoch is not reported (a later run
finishes it).

**Why a run ended.** :attr:`Loop.stopped` is None when the epochs ran out,
else the :class:`Stop` that ended the run first: its reason in words and the
exit status ``sigma train`` ends with (a stopper's criterion: 0, the web
page: 3, Ctrl-C: 130). **Where it writes.** :attr:`Loop.directory` is the run's
own directory (:mod:`sigma_core.rundir`), made when first asked for.
"""

from __future__ import annotations

import inspect
import logging
import shlex
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from . import plugins, rundir
from .config import require, rule_of
from .errors import SigmaError
from .hooks.dispatch import Dispatcher

log = logging.getLogger("sigma")


@dataclass
class EpochReport:
    """An epoch just ended: ``iterations`` is its length and ``trained`` how many of them this run trained (fewer
    when it resumed midway); ``seconds`` is the time they took, pauses not counted."""

    epoch: int
    cost: float
    seconds: float
    iterations: int
    validation: dict = field(default_factory=dict)  # iterator name -> evaluate() report
    trained: int | None = None  # None: all of ``iterations``

    def __post_init__(self):
        if self.trained is None:
            self.trained = self.iterations


@dataclass(frozen=True)
class Stop:
    """What stopped a run before its epochs ran out, in words (``"Ctrl-C"``), and the exit status ``sigma train``
    ends with: 0 for a stopper's criterion, 3 for the web page's Stop, 130 for Ctrl-C."""

    reason: str
    status: int = 0


class State(str, Enum):
    """A loop's execution state (Sigma's ExecutionState)."""

    NONE = "none"  # never started
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


class Strategy:
    """How the loop trains one iteration: an operator (``[operator] type``), built as ``cls(trainer, **settings)``.

    Subclass it and implement :meth:`step`; every other method does nothing
    here. The loop calls them all on the training thread (see the module
    docstring for when). Settings a run file may give are checked against
    the constructor's signature and an optional ``argument_rules`` table.
    """

    def __init__(self, trainer):
        #: The global state: what hooks read and checkpoints save.
        self.trainer = trainer

    def setup(self, loop: Loop) -> None:
        """A run starts: get workers ready (they take the trainer's state)."""

    def step(self, batch: dict):
        """Train one iteration on ``batch`` (a dict of NumPy arrays, ``inputs`` and ``targets``).

        Count it on the trainer (:meth:`Trainer.run_iteration`,
        :meth:`~Trainer.apply_gradients` or :meth:`~Trainer.count_iteration`
        do) and return its cost, a handler number or a float.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement step(batch)")

    def merge(self) -> None:
        """Bring the trainer up to date with work it does not hold yet (an epoch ends or is abandoned)."""

    def reset(self) -> None:
        """The trainer was put back to its initial state: drop copies of the old one."""

    def teardown(self) -> None:
        """The run ended (also after an error): release workers, threads and limits."""


class SingleWorker(Strategy):
    """The trainer's own step, on the training thread."""

    def step(self, batch: dict):
        return self.trainer.run_iteration(batch)


def strategy_from_config(trainer, table: dict, where: str = "operator") -> Strategy:
    """The strategy an ``[operator]`` table names (default: the single worker), its settings checked."""
    return plugins.build("operator", {"type": "single_worker", **table}, trainer, where=where)


class Loop:
    """Runs a trainer epoch by epoch until ``epochs`` or until stopped; see the module docstring."""

    def __init__(self, trainer, strategy: Strategy | None = None, *, epochs: int, hooks=(), directory=None,
                 command_line=None):
        strategy = SingleWorker(trainer) if strategy is None else strategy
        if strategy.trainer is not trainer:
            raise SigmaError(f"loop of trainer {trainer.name!r}: its strategy was built for trainer "
                             f"{strategy.trainer.name!r}")
        self.trainer = trainer
        self.strategy = strategy
        self.epochs = int(epochs)
        #: Delivers the events to the hooks (:mod:`sigma_core.hooks.dispatch`); ``failures`` lists hooks it detached.
        self.dispatcher = Dispatcher()
        self.reports: list[EpochReport] = []
        self.seconds = 0.0
        #: Why the last run stopped before its epochs ran out (a :class:`Stop`); None while running or when they did.
        self.stopped: Stop | None = None
        #: The command that trains this run again (``["sigma", "train", "run.toml", ...]``), if one did.
        self.command_line = None if command_line is None else list(command_line)
        self._directory = None if directory is None else Path(directory)
        self._paused_seconds = 0.0  # time spent paused in all, so that epochs do not count it
        self._state = State.NONE
        # One lock for the state and the flags below; Condition's default RLock lets a hook
        # (running on the training thread inside the loop) signal without deadlocking.
        self._changed = threading.Condition()
        self._active = False  # a training loop is running (possibly paused)
        self._paused = False  # the loop has fired its pause events and is blocked
        self._reset_requested = False
        self._step_requested = False  # run one iteration, then pause again ...
        self._stepped = False  # ... and that iteration has been let through
        self._changes = []  # functions sent by `set` and `extend`, applied on the training thread
        self._calls = []  # (function, Future) sent by `call` commands, run on the training thread
        self._settled = True  # the loop has acted on every signal so far
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.attach_hook(*hooks)

    @property
    def state(self) -> State:
        """The state last signalled; the loop reaches it at its next boundary."""
        return self._state

    @property
    def directory(self) -> Path:
        """The run's own directory (``runs/<name>/version_N``), made when first asked for; see :mod:`sigma_core.rundir`."""
        with self._changed:
            if self._directory is None:
                self._directory = rundir.new_version(self.trainer.name)
            return self._directory

    @property
    def has_directory(self) -> bool:
        """Whether :attr:`directory` has been made (or given): asking for it would make it."""
        return self._directory is not None

    def resume_command(self, checkpoint, overrides=()) -> str | None:
        """The shell command that continues this run from ``checkpoint``; None for a run not started by a command.

        ``overrides`` (``"key=value"``) take the place of the command's own ``--set`` of the same keys, so the
        printed command says each setting once (``training.epochs`` raised to train on, say)."""
        if self.command_line is None:
            return None
        keys = {override.split("=", 1)[0] for override in overrides}
        kept = [part for part in self.command_line
                if not (part.startswith("--set=") and part.removeprefix("--set=").split("=", 1)[0] in keys)]
        return shlex.join([*kept, *(f"--set={override}" for override in overrides), "--resume", str(checkpoint)])

    @property
    def hooks(self) -> list:
        """The hooks the loop runs (those a hook failure detached are gone after the run)."""
        return list(self.dispatcher.hooks)

    def attach_hook(self, *hooks) -> None:
        """Attach hooks before a run starts."""
        self.dispatcher.attach(*hooks)

    # -- starting and waiting ---------------------------------------------------------------
    def run(self) -> list[EpochReport]:
        """Train on the calling thread until ``epochs`` are done or a stop; returns the epoch reports.

        The calling thread keeps the training loop (and Ctrl-C); use
        :meth:`start` to train in the background instead.
        """
        with self._changed:
            if self._state in (State.RUNNING, State.PAUSED):
                raise SigmaError(f"loop of trainer {self.trainer.name!r} is already {self._state.value}")
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
                raise SigmaError(f"cannot start the loop of trainer {self.trainer.name!r} while it is "
                                 "paused; resume it instead")
            self._begin()
            self._error = None
            self._thread = threading.Thread(target=self._loop_in_thread, daemon=True,
                                            name=f"sigma-loop-{self.trainer.name}")
            self._thread.start()

    def join(self, timeout: float | None = None) -> list[EpochReport]:
        """Wait for a :meth:`start`-ed run to end; re-raises the exception that ended it, if any."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"loop of trainer {self.trainer.name!r} still running after {timeout} s")
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
            raise SigmaError(f"loop of trainer {self.trainer.name!r} is still stopping; "
                             "wait_for_state_changed() before starting it again")
        self._state, self._active, self._paused, self._settled = State.RUNNING, True, False, False
        self._step_requested = self._stepped = False
        self.stopped = None

    # -- signals and commands (any thread) -----------------------------------------------------
    def signal_pause(self) -> None:
        """Pause at the next iteration boundary; ignored while paused."""
        with self._changed:
            if self._state is State.PAUSED:
                return
            if self._state is not State.RUNNING:
                raise SigmaError(f"cannot pause the loop of trainer {self.trainer.name!r}: it is "
                                 f"{self._state.value}, not running")
            self._signal(State.PAUSED)

    def signal_resume(self) -> None:
        """Continue a paused run; ignored while running."""
        with self._changed:
            if self._state is State.RUNNING:
                return
            if self._state is not State.PAUSED:
                raise SigmaError(f"cannot resume the loop of trainer {self.trainer.name!r}: it is "
                                 f"{self._state.value}, not paused")
            self._signal(State.RUNNING)

    def signal_stop(self, reason: str = "a stop command", status: int = 0) -> None:
        """End the run after the current iteration (also when paused); ignored when not running.

        ``reason`` and ``status`` become :attr:`stopped` (the first stop's: a repeated stop is ignored).
        """
        with self._changed:
            if self._state in (State.RUNNING, State.PAUSED):
                self.stopped = Stop(reason, status)
                self._signal(State.STOPPED)

    def signal_reset(self) -> None:
        """Put the trainer back to its initial parameters and epoch 0 (see :meth:`Trainer.reset`).

        During a run the loop resets at its next boundary and keeps its state
        (a paused run stays paused); otherwise the reset happens now, on the
        calling thread. Either way the ``reset`` event follows it.
        """
        with self._changed:
            if self._active:
                self._reset_requested = True
                self._settled = False
                self._changed.notify_all()
                return
            self._reset()  # no run: no hook is attached to hear it

    def command(self, name: str, **arguments):
        """Steer the run by name, from any thread: what hooks send (``run.command``).

        ``pause``, ``resume``, ``stop`` and ``reset`` are the ``signal_*``
        methods; ``stop`` may say why and with which exit status (``reason=...``,
        ``status=...``: :meth:`signal_stop`). ``step`` runs one iteration of a paused run and pauses it
        again. ``extend`` with ``epochs`` (an integer >= 1) trains that many
        more epochs than planned. ``set`` with ``key="optimiser.<hyperparameter>"``
        and a number ``value`` changes the optimiser. ``extend`` and ``set``
        apply at the next iteration boundary (at once when no run is active).
        ``call`` with ``fn`` returns a :class:`~concurrent.futures.Future` of
        ``fn()``, run on the training thread at the next boundary (also while
        paused; at once, on the calling thread, when no run is active); ``fn``
        must not wait for the loop. Each command is logged as it arrives
        (``call`` at debug level).
        """
        # A stop is reported where the run ends (sigma train's last line): logging it too would say it twice.
        log.log(logging.DEBUG if name in ("call", "stop") else logging.INFO, "loop of trainer %s: command %s",
                self.trainer.name, " ".join([name, *(f"{key}={value!r}" for key, value in arguments.items())]))
        simple = {"pause": self.signal_pause, "resume": self.signal_resume,
                  "stop": self.signal_stop, "reset": self.signal_reset}
        if name in simple and not arguments:
            return simple[name]()
        if name == "stop" and arguments and set(arguments) <= {"reason", "status"}:
            require("stop: reason", "str", arguments.get("reason", ""))
            require("stop: status", "int in [0, 255]", arguments.get("status", 0))
            return self.signal_stop(**arguments)
        if name == "step" and not arguments:
            with self._changed:
                if self._state is not State.PAUSED:
                    raise SigmaError(f"cannot step the loop of trainer {self.trainer.name!r}: it is "
                                     f"{self._state.value}, not paused")
                self._step_requested = True
                self._signal(State.RUNNING)
            return None
        if name == "set" and set(arguments) == {"key", "value"}:
            key, value = arguments["key"], arguments["value"]
            self._check_setting(key, value)
            return self._change(lambda: self._apply_setting(key, value))
        if name == "extend" and set(arguments) == {"epochs"}:
            require("extend: epochs", "int >= 1", arguments["epochs"])
            return self._change(lambda: self._extend(arguments["epochs"]))
        if name == "call" and set(arguments) == {"fn"}:
            return self._call(arguments["fn"])
        raise SigmaError(f"unknown command {name!r} with arguments {sorted(arguments)} (commands: pause, resume, "
                         "stop [reason=... status=...], reset, step, extend epochs=..., set key=... value=..., "
                         "call fn=...)")

    def _change(self, apply) -> None:
        """Run ``apply`` on the training thread at the next boundary, or now when no run is active."""
        with self._changed:
            if not self._active:
                apply()
                return
            self._changes.append(apply)
            self._settled = False
            self._changed.notify_all()

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

    def _apply_setting(self, key: str, value) -> None:
        setattr(self.trainer.optimiser, key.partition(".")[2], value)
        log.info("loop of trainer %s: %s set to %r", self.trainer.name, key, value)

    def _extend(self, epochs: int) -> None:
        self.epochs += epochs
        log.info("loop of trainer %s: extended to %d epochs", self.trainer.name, self.epochs)

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
            self.strategy.setup(self)
            self.dispatcher.start(self, start)
            self._emit("start")
            while True:
                going_on = self._obey_signals(iterated=False)
                if self._take_reset():
                    self._reset()
                    continue
                if not going_on or trainer.epoch >= self.epochs:
                    break
                self._epoch()
            self._emit("stop")
        finally:
            self.seconds = time.perf_counter() - start  # not counting the wait for threaded hooks
            try:
                self.dispatcher.close()
            finally:
                try:
                    self.strategy.teardown()
                finally:
                    with self._changed:
                        self._state, self._active, self._settled = State.STOPPED, False, True
                        self._run_calls()  # sent too late for the loop: run now, at its end
                        self._changed.notify_all()

    def _epoch(self) -> None:
        """Train the open epoch (or a new one) to its end, unless a stop or reset abandons it."""
        trainer, step = self.trainer, self.strategy.step
        began, paused, trained = time.perf_counter(), self._paused_seconds, 0
        for batch in trainer.open_epoch():
            trainer.train_batch(batch, step)
            trained += 1
            self._emit("iteration")
            # Unlocked reads: a signal that lands just after them is seen at the next boundary.
            if (self._state is not State.RUNNING or self._paused or self._reset_requested or self._step_requested
                    or self._changes or self._calls) and not self._obey_signals():
                self.strategy.merge()
                return  # the caller's loop acts on the stop or reset; the epoch stays open and is not reported
        self.strategy.merge()
        cost = trainer.close_epoch()
        seconds = time.perf_counter() - began - (self._paused_seconds - paused)
        validation = {name: trainer.evaluate(iterator) for name, iterator in trainer.validation.items()}
        report = EpochReport(trainer.epoch, cost, seconds, trainer.iteration, validation, trained)
        self.reports.append(report)
        self._emit("epoch", report=report)

    def _obey_signals(self, iterated: bool = True) -> bool:
        """Act on signals at a boundary, blocking while paused; False on a pending stop or reset.

        Changes sent by ``set`` and ``extend`` are applied and functions sent by ``call`` run here, on the
        training thread. A ``step`` lets one iteration through and then pauses again. Pause and resume events
        are emitted outside the lock, so their hooks may signal too.
        """
        while True:
            with self._changed:
                changes, self._changes = self._changes, []
                for apply in changes:
                    apply()
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
                    waited = time.perf_counter()
                    self._changed.wait()
                    self._paused_seconds += time.perf_counter() - waited
                    continue
                self._paused = not self._paused  # entering or leaving the pause
                event = "pause" if self._paused else "resume"
            self._emit(event)

    def _settle(self) -> None:
        self._settled = True
        self._changed.notify_all()

    def _take_reset(self) -> bool:
        with self._changed:
            requested, self._reset_requested = self._reset_requested, False
            return requested

    def _reset(self) -> None:
        """Reset the trainer, forget its epoch reports, let the strategy drop its copies, emit ``reset``."""
        self.trainer.reset()
        self.reports.clear()
        self.strategy.reset()
        self._emit("reset")

    # -- events --------------------------------------------------------------------------------------
    def _emit(self, event: str, **arguments) -> None:
        """The one place an event leaves the loop: to the hooks that want it (:meth:`Dispatcher.emit`)."""
        self.dispatcher.emit(event, **arguments)

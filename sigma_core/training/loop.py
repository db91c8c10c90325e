"""The training loop: epochs, iterations, the commands that steer a run, and its events.

:class:`Loop` is the one place a run's epochs and iterations happen. Its :class:`Operator` (what an
``[operator]`` table names) trains each iteration; the loop owns the rest: the run's state, the commands other
threads and hooks send, validation at each epoch's end, and the events hooks receive (:mod:`sigma_core.hooks`),
each emitted once, by :meth:`Loop._emit`. Commands act only at iteration boundaries: the hooks and the handler
are not safe to use from two threads at once, and a half-done iteration cannot be paused.

Events: ``start``; ``iteration`` after each step; ``epoch`` after each epoch's validation; ``pause`` and
``resume`` when the loop blocks and wakes; ``reset`` after the trainer went back to its initial state; ``stop``
when the run ends without an error. A stop or reset abandons the open epoch after its current iteration, unreported
(a later run finishes it).
"""

import functools
import inspect
import logging
import shlex
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from sigma_core import plugins

from sigma_core.training import rundir
from sigma_core.config import require, rule_of
from sigma_core.errors import SigmaError
from sigma_core.hooks.dispatch import Dispatcher

log = logging.getLogger("sigma")


@dataclass
class EpochReport:
    """An epoch just ended: ``iterations`` is its length and ``trained`` how many of them this run trained (fewer
    when it resumed midway; None: all); ``seconds`` is the time they took, pauses not counted."""

    epoch: int
    cost: float
    seconds: float
    iterations: int
    validation: dict = field(default_factory=dict)  # iterator name -> evaluate() report
    trained: int | None = None

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


class Operator:
    """How the loop trains one iteration: an operator (``[operator] type``), built as ``cls(trainer, **settings)``
    (checked against its signature and ``argument_rules``). Implement :meth:`step`; the other methods do nothing
    here. The loop calls them all on the training thread (docs/plugins.md, "Operator")."""

    def __init__(self, trainer):
        #: The global state: what hooks read and checkpoints save.
        self.trainer = trainer

    def setup(self, loop: "Loop") -> None:
        """A run starts, before its ``start`` event: get workers ready (they take the trainer's state)."""

    def step(self, batch: dict):
        """Train one iteration on ``batch`` (NumPy arrays, ``inputs`` and ``targets``) and return its cost, a
        handler number or a float; the loop counts it (:meth:`~Trainer.train_batch`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(batch)")

    def merge(self) -> None:
        """Bring the trainer up to date with work it does not hold yet: at each epoch's end (before validation),
        and when a stop or reset abandons one."""

    def reset(self) -> None:
        """A reset put the trainer back to its initial state: drop copies of the old one."""

    def teardown(self) -> None:
        """The run ended (also after an error): release workers, threads and limits."""


class SingleWorker(Operator):
    """The trainer's own step, on the training thread."""

    def step(self, batch: dict):
        return self.trainer.compiled_step(batch)


def operator_from_config(trainer, table: dict) -> Operator:
    """The operator an ``[operator]`` table names (default: the single worker), its settings checked."""
    return plugins.build("operator", {"type": "single_worker", **table}, trainer, where="operator")


class Loop:
    """Trains a trainer epoch by epoch until ``epochs`` or a stop, on the calling thread (:meth:`run`) or a new one
    (:meth:`start`), steered from any thread by :meth:`command` and the ``signal_*`` methods (Sigma's worker rules:
    a paused loop blocks until resumed, stopped or reset; pause or resume after a stop raises)."""

    def __init__(self, trainer, operator: Operator | None = None, *, epochs: int, hooks=(), directory=None,
                 command_line=None, config: dict | None = None):
        operator = SingleWorker(trainer) if operator is None else operator
        if operator.trainer is not trainer:
            raise SigmaError(f"loop of trainer {trainer.name!r}: its operator was built for trainer "
                             f"{operator.trainer.name!r}")
        self.trainer = trainer
        self.operator = operator
        self.epochs = int(epochs)
        #: The validated run file the run was built from, if any: its checkpoints save it, hooks read it (``config``
        #: of their :class:`~sigma_core.hooks.values.RunView`), and an operator may in ``setup``.
        self.config = config
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
        # One lock for the state and the flags below; Condition's default RLock lets a hook
        # (running on the training thread inside the loop) signal without deadlocking.
        self._changed = threading.Condition()
        self._state = State.NONE
        self._active = False  # a training loop is running (possibly paused)
        self._paused = False  # the loop has emitted its pause event and is blocked
        self._reset_requested = False
        self._step_requested = False  # run one iteration, then pause again ...
        self._stepped = False  # ... and that iteration has been let through
        self._calls = []  # (function, Future) sent by `set`, `extend` and `call`, run on the training thread
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
        """The run's own directory (``runs/<name>/version_N``, :mod:`sigma_core.training.rundir`), made when first
        asked for."""
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
        """Train on the calling thread (which keeps Ctrl-C) until ``epochs`` are done or a stop; returns the epoch
        reports."""
        with self._changed:
            if self._state in (State.RUNNING, State.PAUSED):
                raise SigmaError(f"loop of trainer {self.trainer.name!r} is already {self._state.value}")
            self._begin()
        self._loop()
        return self.reports

    def start(self) -> None:
        """Train on a new thread and return at once (:meth:`join` waits for the end); after a stop, from the
        trainer's current epoch. Ignored while running; raises while paused."""
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
        """Block until the loop has acted on the last signal (a paused loop is blocked, a stopped one has ended),
        so a caller can tell "asked to pause" from "paused"; False on timeout."""
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
            if self._state is not State.PAUSED:
                self._require(State.RUNNING, "pause")
                self._signal(State.PAUSED)

    def signal_resume(self) -> None:
        """Continue a paused run; ignored while running."""
        with self._changed:
            if self._state is not State.RUNNING:
                self._require(State.PAUSED, "resume")
                self._signal(State.RUNNING)

    def signal_stop(self, reason: str = "a stop command", status: int = 0) -> None:
        """End the run after the current iteration (also when paused), ``reason`` and ``status`` becoming
        :attr:`stopped`; ignored when not running, and when repeated (the first stop says why)."""
        with self._changed:
            if self._state in (State.RUNNING, State.PAUSED):
                self.stopped = Stop(reason, status)
                self._signal(State.STOPPED)

    def signal_reset(self) -> None:
        """Put the trainer back to its initial parameters and epoch 0 (see :meth:`Trainer.reset`), then emit
        ``reset``: during a run at its next boundary (a paused run stays paused), otherwise now."""
        with self._changed:
            if self._active:
                self._reset_requested = True
                self._signal()
            else:
                self._reset()  # no run: no hook is attached to hear it

    def command(self, name: str, **arguments):
        """Steer the run by name from any thread (what hooks send: ``run.command``); logged as it arrives.

        ``pause``, ``resume``, ``reset``, ``stop`` (``reason=``, ``status=``): the ``signal_*`` methods; ``step``:
        one iteration of a paused run; ``extend`` (``epochs=``): more epochs than planned; ``set`` (``key=
        "optimiser.<hyperparameter>"``, ``value=``); ``call`` (``fn=``, which must not wait for the loop): a
        Future of ``fn()``. The last three act on the training thread at the next boundary (``call`` also while
        paused), at once when no run is active.
        """
        # A stop is reported where the run ends (sigma train's last line): logging it too would say it twice.
        log.log(logging.DEBUG if name in ("call", "stop") else logging.INFO, "loop of trainer %s: command %s",
                self.trainer.name, " ".join([name, *(f"{key}={value!r}" for key, value in arguments.items())]))
        given = set(arguments)
        plain = {"pause": self.signal_pause, "resume": self.signal_resume, "reset": self.signal_reset,
                 "step": self._step}
        if name in plain and not given:
            return plain[name]()
        if name == "stop" and given <= {"reason", "status"}:
            require("stop: reason", "str", arguments.get("reason", ""))
            require("stop: status", "int in [0, 255]", arguments.get("status", 0))
            return self.signal_stop(**arguments)
        if name == "set" and given == {"key", "value"}:
            self._check_setting(**arguments)
            return self._call(functools.partial(self._apply_setting, **arguments))
        if name == "extend" and given == {"epochs"}:
            require("extend: epochs", "int >= 1", arguments["epochs"])
            return self._call(functools.partial(self._extend, arguments["epochs"]))
        if name == "call" and given == {"fn"}:
            return self._call(arguments["fn"])
        raise SigmaError(f"unknown command {name!r} with arguments {sorted(arguments)} (commands: pause, resume, "
                         "stop [reason=... status=...], reset, step, extend epochs=..., set key=... value=..., "
                         "call fn=...)")

    def _step(self) -> None:
        with self._changed:
            self._require(State.PAUSED, "step")
            self._step_requested = True
            self._signal(State.RUNNING)

    def _call(self, fn) -> Future:
        """Run ``fn`` on the training thread at the next boundary, or now when no run is active; its result (or
        exception) goes to the Future returned."""
        future = Future()
        with self._changed:
            self._calls.append((fn, future))
            if self._active:
                self._signal()
            else:
                self._run_calls()
        return future

    def _run_calls(self) -> None:
        """Run the functions sent by ``call`` (lock held), handing each result or exception to its future."""
        calls, self._calls = self._calls, []
        for fn, future in calls:
            if future.set_running_or_notify_cancel():  # else the caller gave up waiting
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

    def _require(self, state: State, action: str) -> None:
        if self._state is not state:
            raise SigmaError(f"cannot {action} the loop of trainer {self.trainer.name!r}: it is "
                             f"{self._state.value}, not {state.value}")

    def _signal(self, state: State | None = None) -> None:
        """Tell the training loop (lock held) to act at its next boundary: on ``state``, or on a flag or queue."""
        if state is not None:
            self._state = state
        self._settled = False
        self._changed.notify_all()

    def _settle(self) -> None:
        self._settled = True
        self._changed.notify_all()

    # -- the training loop (one thread) -----------------------------------------------------------
    def _loop_in_thread(self) -> None:
        try:
            self._loop()
        except BaseException as error:  # handed to join()
            self._error = error

    def _loop(self) -> None:
        start = time.perf_counter()
        try:
            self.operator.setup(self)
            self.dispatcher.start(self, start)
            self._emit("start")
            while True:
                going_on = self._obey_signals(iterated=False)
                with self._changed:
                    reset, self._reset_requested = self._reset_requested, False
                if reset:
                    self._reset()
                elif going_on and self.trainer.epoch < self.epochs:
                    self._epoch()
                else:
                    break
            self._emit("stop")
        finally:
            self.seconds = time.perf_counter() - start  # not counting the wait for threaded hooks
            try:
                self.dispatcher.close()
            finally:
                try:
                    self.operator.teardown()
                finally:
                    with self._changed:
                        self._state, self._active = State.STOPPED, False
                        self._run_calls()  # sent too late for the loop: run now, at its end
                        self._settle()

    def _epoch(self) -> None:
        """Train the open epoch (or a new one) to its end, unless a stop or reset abandons it."""
        trainer, step = self.trainer, self.operator.step
        began, paused, trained = time.perf_counter(), self._paused_seconds, 0
        for batch in trainer.open_epoch():
            trainer.train_batch(batch, step)
            trained += 1
            self._emit("iteration")
            # Unlocked reads: a signal that lands just after them is seen at the next boundary.
            if (self._state is not State.RUNNING or self._paused or self._reset_requested or self._step_requested
                    or self._calls) and not self._obey_signals():
                self.operator.merge()
                return  # the caller's loop acts on the stop or reset; the epoch stays open and is not reported
        self.operator.merge()
        cost = trainer.close_epoch()
        seconds = time.perf_counter() - began - (self._paused_seconds - paused)
        validation = {name: trainer.evaluate(iterator) for name, iterator in trainer.validation.items()}
        report = EpochReport(trainer.epoch, cost, seconds, trainer.iteration, validation, trained)
        self.reports.append(report)
        self._emit("epoch", report=report)

    def _obey_signals(self, iterated: bool = True) -> bool:
        """Act on signals at a boundary (``set``, ``extend`` and ``call`` run here, a ``step`` lets one iteration
        through), blocking while paused; False on a pending stop or reset. Pause and resume are emitted outside
        the lock, so their hooks may signal too."""
        while True:
            with self._changed:
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

    def _reset(self) -> None:
        """Reset the trainer, forget its epoch reports, let the operator drop its copies, emit ``reset``."""
        self.trainer.reset()
        self.reports.clear()
        self.operator.reset()
        self._emit("reset")

    # -- events --------------------------------------------------------------------------------------
    def _emit(self, event: str, **arguments) -> None:
        """The one place an event leaves the loop: to the hooks that want it (:meth:`Dispatcher.emit`)."""
        self.dispatcher.emit(event, **arguments)

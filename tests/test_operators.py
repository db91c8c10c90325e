"""The loop's states and signals (Sigma's worker rules), commands, reset, and concurrent trainers."""

from __future__ import annotations

import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sigma_core import ConfigError, Loop, SigmaError, SingleWorker, State
from sigma_core import config as run_config
from sigma_core.hooks import Hook
from sigma_core.run import build_run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def iris_run(epochs=3, name="iris", seed=0):
    raw = tomllib.loads((EXAMPLES / "iris.toml").read_text())
    raw["training"]["epochs"] = epochs
    raw["name"], raw["seed"] = name, seed
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    return run


class Events(Hook):
    """Records the start, pause, resume, reset and stop events, with the trainer's counters and the thread."""

    def __init__(self, log):
        self.log = log

    def _record(self, event):
        values = self.run.values
        self.log.append((event, values["epoch"], values["total_iterations"], threading.current_thread()))

    def on_start(self):
        self._record("start")

    def on_pause(self):
        self._record("pause")

    def on_resume(self):
        self._record("resume")

    def on_reset(self):
        self._record("reset")

    def on_stop(self):
        self._record("stop")


def events_hooks(log):
    return [Events(log)]


class AtIteration(Hook):
    """Calls ``act(hook)`` once, after the run's ``at``-th iteration (counted over resets)."""

    def __init__(self, at, act):
        self.at, self.act, self.seen = at, act, 0

    def on_iteration(self):
        self.seen += 1
        if self.seen == self.at:
            self.act(self)


def parameters(trainer) -> dict:
    return {pid: array.to_numpy().copy() for pid, array in trainer.network.parameters.items()}


def assert_same(first: dict, second: dict):
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_state_rules_pause_resume_stop_from_another_thread():
    log = []
    run = iris_run(epochs=100_000)
    loop = Loop(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    assert loop.state is State.NONE
    with pytest.raises(SigmaError, match="not running"):
        loop.signal_pause()
    loop.signal_stop()  # nothing to stop: ignored
    assert loop.state is State.NONE

    loop.start()
    loop.start()  # ignored while running
    assert loop.wait_for_state_changed(10) and loop.state is State.RUNNING

    loop.signal_pause()
    assert loop.wait_for_state_changed(10) and loop.state is State.PAUSED
    with pytest.raises(SigmaError, match="paused; resume it"):
        loop.start()
    loop.signal_pause()  # ignored while paused
    frozen = run.trainer.total_iterations
    cpu = time.process_time()
    time.sleep(0.3)
    assert run.trainer.total_iterations == frozen  # blocked at an iteration boundary
    assert time.process_time() - cpu < 0.1  # waiting on a condition, not spinning

    loop.signal_resume()
    loop.signal_resume()  # ignored while running
    assert loop.wait_for_state_changed(10) and loop.state is State.RUNNING
    deadline = time.monotonic() + 10
    while run.trainer.total_iterations == frozen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.trainer.total_iterations > frozen

    loop.signal_stop()
    loop.signal_stop()  # repeated stop: ignored
    assert loop.wait_for_state_changed(10) and loop.state is State.STOPPED
    loop.join()
    with pytest.raises(SigmaError, match="stopped, not running"):
        loop.signal_pause()
    with pytest.raises(SigmaError, match="stopped, not paused"):
        loop.signal_resume()

    # every hook ran on the training thread, once per transition, in order
    assert [event for event, *_ in log] == ["start", "pause", "resume", "stop"]
    assert {thread for *_, thread in log} == {loop._thread}
    (_, _, paused_at, _), (_, _, resumed_at, _) = log[1], log[2]
    assert paused_at == resumed_at == frozen


def test_stop_while_paused_ends_the_run_without_a_resume():
    log = []
    run = iris_run(epochs=100_000)
    loop = Loop(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    loop.start()
    loop.signal_pause()
    assert loop.wait_for_state_changed(10)
    loop.signal_stop()
    loop.join(10)
    assert loop.state is State.STOPPED
    assert [event for event, *_ in log] == ["start", "pause", "stop"]


def test_restart_after_stop_continues_from_the_current_epoch():
    run = iris_run(epochs=4)

    class StopAtEpoch2(Hook):
        def on_epoch(self, report):
            if report.epoch == 2:
                self.run.command("stop")

    loop = Loop(run.trainer, epochs=run.epochs, hooks=[StopAtEpoch2()])
    assert [r.epoch for r in loop.run()] == [1, 2]
    loop.start()
    assert [r.epoch for r in loop.join(30)] == [1, 2, 3, 4]


def test_reset_restores_the_initial_parameters_and_repeats_the_run_bit_for_bit():
    log = []
    run = iris_run(epochs=2)
    initial = parameters(run.trainer)
    loop = Loop(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    first = [report.cost for report in loop.run()]
    trained = parameters(run.trainer)

    loop.signal_reset()  # not running: resets now, on this thread (no run, so no hook hears it)
    assert run.trainer.epoch == run.trainer.iteration == run.trainer.total_iterations == 0
    assert_same(parameters(run.trainer), initial)
    assert loop.reports == [] and log[-1][0] == "stop"

    second = [report.cost for report in loop.run()]
    assert second == first
    assert_same(parameters(run.trainer), trained)


def test_reset_during_a_run_restarts_training_from_epoch_0():
    log = []
    reference = iris_run(epochs=3)
    expected = [report.cost for report in Loop(reference.trainer, epochs=3).run()]

    run = iris_run(epochs=3)
    loop = Loop(run.trainer, epochs=3, hooks=[AtIteration(40, lambda hook: hook.run.command("reset")),
                                              *events_hooks(log)])
    reports = loop.run()
    assert [event for event, *_ in log] == ["start", "reset", "stop"]
    assert [report.epoch for report in reports] == [1, 2, 3]  # the interrupted epoch 2 is forgotten
    assert [report.cost for report in reports] == expected
    assert_same(parameters(run.trainer), parameters(reference.trainer))


def test_reset_while_paused_stays_paused():
    log = []
    run = iris_run(epochs=100_000)
    loop = Loop(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    loop.start()
    time.sleep(0.05)
    loop.signal_pause()
    assert loop.wait_for_state_changed(10)
    loop.signal_reset()
    assert loop.wait_for_state_changed(10) and loop.state is State.PAUSED
    assert run.trainer.total_iterations == 0 and log[-1][0] == "reset"
    loop.signal_stop()
    loop.join(10)
    assert [event for event, *_ in log] == ["start", "pause", "reset", "stop"]


@pytest.mark.parametrize("where", ["mid-epoch", "last iteration of an epoch"])
def test_a_step_while_paused_trains_exactly_one_iteration(where):
    run = iris_run(epochs=100)
    per_epoch = len(run.trainer.training_iterator)
    at = per_epoch - 1 if where == "mid-epoch" else per_epoch  # the epoch boundary comes between pause and step
    loop = Loop(run.trainer, epochs=100, hooks=[AtIteration(at, lambda hook: hook.run.command("pause"))])
    loop.start()
    while loop.state is not State.PAUSED:
        assert loop.wait_for_state_changed(30)
    assert run.trainer.total_iterations == at
    loop.command("step")
    assert loop.wait_for_state_changed(30) and loop.state is State.PAUSED
    assert run.trainer.total_iterations == at + 1
    loop.signal_stop()
    loop.join(30)


def test_an_error_on_the_training_thread_is_raised_by_join():
    def boom(hook):
        raise SigmaError("boom")  # a hook's SigmaError ends the run (other errors only detach the hook)

    run = iris_run(epochs=2)
    operator = Recording(run.trainer)
    loop = Loop(run.trainer, operator, epochs=2, hooks=[AtIteration(3, boom)])
    loop.start()
    with pytest.raises(SigmaError, match="boom"):
        loop.join(30)
    assert loop.state is State.STOPPED
    assert operator.calls[0] == "setup" and operator.calls[-1] == "teardown"  # torn down after the error too


# --- the operator ----------------------------------------------------------------------------


class Recording(SingleWorker):
    """The single worker, recording what the loop asks of it."""

    def __init__(self, trainer):
        super().__init__(trainer)
        self.calls = []

    def setup(self, loop):
        self.calls.append("setup")

    def step(self, batch):
        self.calls.append("step")
        return super().step(batch)

    def merge(self):
        self.calls.append("merge")

    def reset(self):
        self.calls.append("reset")

    def teardown(self):
        self.calls.append("teardown")


def test_the_loop_asks_its_strategy_for_every_step_a_merge_per_epoch_and_a_reset():
    run = iris_run(epochs=2)
    per_epoch = len(run.trainer.training_iterator)
    operator = Recording(run.trainer)
    loop = Loop(run.trainer, operator, epochs=2, hooks=[AtIteration(3, lambda hook: hook.run.command("reset"))])
    reports = loop.run()
    epoch = ["step"] * per_epoch + ["merge"]
    # the reset abandons the first epoch after 3 steps: merged, then reset; then two whole epochs
    assert operator.calls == ["setup", *["step"] * 3, "merge", "reset", *epoch, *epoch, "teardown"]
    assert [report.epoch for report in reports] == [1, 2] and run.trainer.total_iterations == 2 * per_epoch


def test_a_strategy_of_another_trainer_is_refused():
    first, second = iris_run(name="a"), iris_run(name="b")
    with pytest.raises(SigmaError, match="loop of trainer 'a': its operator was built for trainer 'b'"):
        Loop(first.trainer, SingleWorker(second.trainer), epochs=1)


def test_extend_trains_more_epochs_than_planned():
    run = iris_run(epochs=1)
    loop = Loop(run.trainer, epochs=1, hooks=[AtIteration(2, lambda hook: hook.run.command("extend", epochs=2))])
    assert [report.epoch for report in loop.run()] == [1, 2, 3] and loop.epochs == 3
    loop.command("extend", epochs=1)  # no run: at once
    assert loop.epochs == 4
    with pytest.raises(ConfigError, match=r"^extend: epochs: expected an integer >= 1, got 0$"):
        loop.command("extend", epochs=0)
    with pytest.raises(SigmaError, match=r"unknown command 'extend' with arguments \['by'\]"):
        loop.command("extend", by=2)


# --- concurrent trainers -------------------------------------------------------------------


def test_two_loops_train_concurrently_as_they_would_alone():
    alone = {}
    for name, seed in (("a", 0), ("b", 1)):
        run = iris_run(epochs=3, name=name, seed=seed)
        alone[name] = ([r.cost for r in Loop(run.trainer, epochs=3).run()], parameters(run.trainer))

    threads = {}

    class WhichThread(Hook):
        def on_iteration(self):
            threads.setdefault(self.run.name, set()).add(threading.current_thread())

    runs = {name: iris_run(epochs=3, name=name, seed=seed) for name, seed in (("a", 0), ("b", 1))}
    loops = {name: Loop(run.trainer, epochs=3, hooks=[WhichThread()]) for name, run in runs.items()}
    for loop in loops.values():
        loop.start()
    results = {name: loop.join(60) for name, loop in loops.items()}
    for name, run in runs.items():
        assert [r.cost for r in results[name]] == alone[name][0]
        assert_same(parameters(run.trainer), alone[name][1])
    assert all(loop.state is State.STOPPED for loop in loops.values())
    assert len(threads["a"]) == len(threads["b"]) == 1 and threads["a"] != threads["b"]
    assert threading.main_thread() not in threads["a"] | threads["b"]


def test_a_run_stopped_mid_epoch_finishes_that_epoch_when_started_again():
    from sigma_core.compute.backend import create_handler
    from sigma_core.model.constructs import Dense, Input, SoftmaxCE
    from sigma_core.data import MinibatchIterator
    from sigma_core.model.network import Network
    from sigma_core.training.optimisers import GradientDescent
    from sigma_core.training.trainer import Trainer
    from sigmann_sklearn.datasets import load_sklearn

    iterator = MinibatchIterator(load_sklearn("digits"), 120, seed=0)
    trainer = Trainer(Network(Input(64) + Dense(10) + SoftmaxCE()), GradientDescent(0.01), iterator)
    trainer.initialise(create_handler("numpy", seed=0))
    loop = Loop(trainer, epochs=2)
    loop.attach_hook(AtIteration(5, lambda hook: hook.run.command("stop")))
    loop.run()
    assert (trainer.epoch, trainer.iteration, trainer.in_epoch) == (0, 5, True)
    reports = loop.run()
    assert [(r.epoch, r.iterations) for r in reports] == [(1, len(iterator)), (2, len(iterator))]
    assert trainer.total_iterations == 2 * len(iterator)

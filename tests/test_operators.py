"""Operator states and signals (Sigma's worker rules), reset, and concurrent trainers in an environment."""

from __future__ import annotations

import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sigma_core import config as run_config
from sigma_core.environment import Environment
from sigma_core.errors import SigmaError
from sigma_core.hooks import Hook, after, every
from sigma_core.monitors import Monitor
from sigma_core.operators import SingleWorkerOperator, State
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
    """Records which time scale fired, with the trainer's counters and the thread it ran on."""

    def __init__(self, scale, log):
        super().__init__(every(1, scale), parameters={"scale": scale})
        self.scale, self.log = scale, log

    def invoke(self, registry, resolver):
        self.log.append((self.scale, registry["epoch"], registry["total_iterations"], threading.current_thread()))


def events_hooks(log):
    return [Events(scale, log) for scale in ("start", "pause", "resume", "reset", "stop")]


def parameters(trainer) -> dict:
    return {pid: array.to_numpy().copy() for pid, array in trainer.network.parameters.items()}


def assert_same(first: dict, second: dict):
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_state_rules_pause_resume_stop_from_another_thread():
    log = []
    run = iris_run(epochs=100_000)
    operator = SingleWorkerOperator(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    assert operator.state is State.NONE
    with pytest.raises(SigmaError, match="not running"):
        operator.signal_pause()
    operator.signal_stop()  # nothing to stop: ignored
    assert operator.state is State.NONE

    operator.start()
    operator.start()  # ignored while running
    assert operator.wait_for_state_changed(10) and operator.state is State.RUNNING

    operator.signal_pause()
    assert operator.wait_for_state_changed(10) and operator.state is State.PAUSED
    with pytest.raises(SigmaError, match="paused; resume it"):
        operator.start()
    operator.signal_pause()  # ignored while paused
    frozen = run.trainer.total_iterations
    cpu = time.process_time()
    time.sleep(0.3)
    assert run.trainer.total_iterations == frozen  # blocked at an iteration boundary
    assert time.process_time() - cpu < 0.1  # waiting on a condition, not spinning

    operator.signal_resume()
    operator.signal_resume()  # ignored while running
    assert operator.wait_for_state_changed(10) and operator.state is State.RUNNING
    deadline = time.monotonic() + 10
    while run.trainer.total_iterations == frozen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.trainer.total_iterations > frozen

    operator.signal_stop()
    operator.signal_stop()  # repeated stop: ignored
    assert operator.wait_for_state_changed(10) and operator.state is State.STOPPED
    operator.join()
    with pytest.raises(SigmaError, match="stopped, not running"):
        operator.signal_pause()
    with pytest.raises(SigmaError, match="stopped, not paused"):
        operator.signal_resume()

    # every hook ran on the training thread, once per transition, in order
    assert [scale for scale, *_ in log] == ["start", "pause", "resume", "stop"]
    assert {thread for *_, thread in log} == {operator._thread}
    (_, _, paused_at, _), (_, _, resumed_at, _) = log[1], log[2]
    assert paused_at == resumed_at == frozen


def test_stop_while_paused_ends_the_run_without_a_resume():
    log = []
    run = iris_run(epochs=100_000)
    operator = SingleWorkerOperator(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    operator.start()
    operator.signal_pause()
    assert operator.wait_for_state_changed(10)
    operator.signal_stop()
    operator.join(10)
    assert operator.state is State.STOPPED
    assert [scale for scale, *_ in log] == ["start", "pause", "stop"]


def test_restart_after_stop_continues_from_the_current_epoch():
    run = iris_run(epochs=4)

    class StopAtEpoch2(Hook):
        def invoke(self, registry, resolver):
            self.operator.signal_stop()

    operator = SingleWorkerOperator(run.trainer, epochs=run.epochs, hooks=[StopAtEpoch2(after(2, "epoch"))])
    assert [r.epoch for r in operator.run()] == [1, 2]
    operator.start()
    assert [r.epoch for r in operator.join(30)] == [1, 2, 3, 4]


def test_reset_restores_the_initial_parameters_and_repeats_the_run_bit_for_bit():
    log = []
    run = iris_run(epochs=2)
    initial = parameters(run.trainer)
    operator = SingleWorkerOperator(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    first = [report.cost for report in operator.run()]
    trained = parameters(run.trainer)

    operator.signal_reset()  # not running: resets now, on this thread
    assert run.trainer.epoch == run.trainer.iteration == run.trainer.total_iterations == 0
    assert_same(parameters(run.trainer), initial)
    assert operator.reports == [] and log[-1][:3] == ("reset", 0, 0)

    second = [report.cost for report in operator.run()]
    assert second == first
    assert_same(parameters(run.trainer), trained)


def test_reset_during_a_run_restarts_training_from_epoch_0():
    class ResetOnce(Hook):
        def invoke(self, registry, resolver):
            self.operator.signal_reset()

    log = []
    reference = iris_run(epochs=3)
    expected = [report.cost for report in SingleWorkerOperator(reference.trainer, epochs=3).run()]

    run = iris_run(epochs=3)
    operator = SingleWorkerOperator(run.trainer, epochs=3,
                                    hooks=[ResetOnce(after(40, "iteration")), *events_hooks(log)])
    reports = operator.run()
    assert [scale for scale, *_ in log] == ["start", "reset", "stop"]
    assert [report.epoch for report in reports] == [1, 2, 3]  # the interrupted epoch 2 is forgotten
    assert [report.cost for report in reports] == expected
    assert_same(parameters(run.trainer), parameters(reference.trainer))


def test_reset_while_paused_stays_paused():
    log = []
    run = iris_run(epochs=100_000)
    operator = SingleWorkerOperator(run.trainer, epochs=run.epochs, hooks=events_hooks(log))
    operator.start()
    time.sleep(0.05)
    operator.signal_pause()
    assert operator.wait_for_state_changed(10)
    operator.signal_reset()
    assert operator.wait_for_state_changed(10) and operator.state is State.PAUSED
    assert run.trainer.total_iterations == 0 and log[-1][0] == "reset"
    operator.signal_stop()
    operator.join(10)
    assert [scale for scale, *_ in log] == ["start", "pause", "reset", "stop"]


class _PauseAt(Monitor):
    def __init__(self, at):
        super().__init__()
        self.name, self.every, self.at = "pause", 1, at

    def on_iteration(self):
        if self.values["total_iterations"] == self.at:
            self.operator.signal_pause()


@pytest.mark.parametrize("where", ["mid-epoch", "last iteration of an epoch"])
def test_a_step_while_paused_trains_exactly_one_iteration(where):
    run = iris_run(epochs=100)
    per_epoch = len(run.trainer.training_iterator)
    at = per_epoch - 1 if where == "mid-epoch" else per_epoch  # the epoch boundary comes between pause and step
    operator = SingleWorkerOperator(run.trainer, epochs=100, monitors=[_PauseAt(at)])
    operator.start()
    while operator.state is not State.PAUSED:
        assert operator.wait_for_state_changed(30)
    assert run.trainer.total_iterations == at
    operator.command("step")
    assert operator.wait_for_state_changed(30) and operator.state is State.PAUSED
    assert run.trainer.total_iterations == at + 1
    operator.signal_stop()
    operator.join(30)


def test_an_error_on_the_training_thread_is_raised_by_join():
    class Boom(Hook):
        def invoke(self, registry, resolver):
            raise RuntimeError("boom")

    run = iris_run(epochs=2)
    operator = SingleWorkerOperator(run.trainer, epochs=2, hooks=[Boom(after(3, "iteration"))])
    operator.start()
    with pytest.raises(RuntimeError, match="boom"):
        operator.join(30)
    assert operator.state is State.STOPPED


# --- environments ---------------------------------------------------------------------


def test_environment_trains_two_trainers_concurrently_as_they_would_alone():
    alone = {}
    for name, seed in (("a", 0), ("b", 1)):
        run = iris_run(epochs=3, name=name, seed=seed)
        alone[name] = ([r.cost for r in SingleWorkerOperator(run.trainer, epochs=3).run()], parameters(run.trainer))

    threads = {}

    class WhichThread(Hook):
        def invoke(self, registry, resolver):
            threads.setdefault(registry["trainer"]["name"], set()).add(threading.current_thread())

    environment = Environment()
    runs = {name: iris_run(epochs=3, name=name, seed=seed) for name, seed in (("a", 0), ("b", 1))}
    for run in runs.values():
        environment.add_trainer(run.trainer, run.handler, epochs=3, hooks=[WhichThread(every(1, "iteration"))])
    results = environment.run(concurrent=True)
    for name, run in runs.items():
        assert [r.cost for r in results[name]] == alone[name][0]
        assert_same(parameters(run.trainer), alone[name][1])
    assert all(operator.state is State.STOPPED for operator in environment.operators.values())
    assert len(threads["a"]) == len(threads["b"]) == 1 and threads["a"] != threads["b"]
    assert threading.main_thread() not in threads["a"] | threads["b"]


def test_concurrent_trainers_must_not_share_a_handler():
    environment = Environment()
    first, second = iris_run(name="a"), iris_run(name="b")
    environment.add_trainer(first.trainer, first.handler, epochs=1)
    second.trainer.handler = None
    environment.add_trainer(second.trainer, first.handler, epochs=1)
    with pytest.raises(SigmaError, match="trainers 'a' and 'b' share a handler"):
        environment.run(concurrent=True)


def test_a_failing_concurrent_trainer_is_named_after_every_trainer_finished():
    class Boom(Hook):
        def invoke(self, registry, resolver):
            raise RuntimeError("boom")

    environment = Environment()
    runs = {name: iris_run(name=name, epochs=2) for name in ("a", "b")}
    environment.add_trainer(runs["a"].trainer, runs["a"].handler, epochs=2)
    environment.add_trainer(runs["b"].trainer, runs["b"].handler, epochs=2, hooks=[Boom(after(2, "iteration"))])
    with pytest.raises(SigmaError, match="trainer 'b' failed: boom"):
        environment.run(concurrent=True)
    assert runs["a"].trainer.epoch == 2


class _StopAfter(Monitor):
    """A monitor that sends stop after ``n`` iterations."""

    def __init__(self, n):
        super().__init__()
        self.n, self.seen = n, 0

    def on_iteration(self):
        self.seen += 1
        if self.seen == self.n:
            self.command("stop")


def test_a_run_stopped_mid_epoch_finishes_that_epoch_when_started_again():
    from sigma_core.backend import create_handler
    from sigma_core.constructs import Dense, Input, SoftmaxCE
    from sigma_core.data import MinibatchIterator
    from sigma_core.network import Network
    from sigma_core.optimisers import GradientDescent
    from sigma_core.trainer import Trainer
    from sigmann_sklearn.datasets import load_sklearn

    iterator = MinibatchIterator(load_sklearn("digits"), 120, seed=0)
    trainer = Trainer(Network(Input(64) + Dense(10) + SoftmaxCE()), GradientDescent(0.01), iterator)
    trainer.initialise(create_handler("numpy", seed=0))
    operator = SingleWorkerOperator(trainer, epochs=2)
    operator.attach_monitor(_StopAfter(5))
    operator.run()
    assert (trainer.epoch, trainer.iteration, trainer.in_epoch) == (0, 5, True)
    reports = operator.run()
    assert [(r.epoch, r.iterations) for r in reports] == [(1, len(iterator)), (2, len(iterator))]
    assert trainer.total_iterations == 2 * len(iterator)

"""The ``threads`` operator: data-parallel workers on one machine (sigma_core.workers)."""

from __future__ import annotations

import copy
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sigma_core import config as run_config
from sigma_core.checkpoint import checkpoints
from sigma_core.errors import ConfigError, NonFiniteError, SigmaError
from sigma_core.hooks import Hook, after, every
from sigma_core.hooks.savers import CheckpointHook
from sigma_core.operators import SingleWorkerOperator, State
from sigma_core.run import build_run
from sigma_core.workers import ThreadsOperator, WorkerError, shard_bounds

DIGITS = tomllib.loads((Path(__file__).resolve().parent.parent / "examples" / "digits.toml").read_text())


def digits_run(handler="numpy", dtype="float64", dropout=False, epochs=2, operator=None, optimiser=None):
    raw = copy.deepcopy(DIGITS)
    if not dropout:
        raw["network"]["layers"] = [layer for layer in raw["network"]["layers"] if layer["type"] != "dropout"]
    raw["handler"] = {"name": handler, "dtype": dtype}
    raw["training"]["epochs"] = epochs
    raw["operator"] = operator or {}
    raw["optimiser"] = optimiser or raw["optimiser"]
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    return run


def parameters(trainer) -> dict:
    return {pid: array.to_numpy().copy() for pid, array in trainer.network.parameters.items()}


def test_shards_cover_the_batch_in_worker_order():
    assert shard_bounds(10, 3) == [0, 3, 6, 10]
    assert shard_bounds(2, 3) == [0, 0, 1, 2]  # fewer records than workers: the first worker sits this one out


# In float32, rounding grows over 90 steps: Adam divides by the root of tiny second moments (digits has pixels
# that are always 0) and a ReLU whose input is near 0 may flip; so there plain gradient descent and a tolerance
# of 1e-4 (weighting the shards 10/11/11 wrongly, or dropping one, misses it by orders of magnitude).
@pytest.mark.parametrize("handler, dtype, optimiser, tolerance", [
    ("numpy", "float64", None, 1e-12), ("cpu", "float32", {"type": "sgd", "learning_rate": 0.1}, 1e-4)])
def test_gradient_averaging_gives_one_worker_on_the_whole_batch(handler, dtype, optimiser, tolerance):
    single = digits_run(handler, dtype, optimiser=optimiser)
    expected = [report.cost for report in SingleWorkerOperator(single.trainer, epochs=2).run()]
    for workers in (2, 3):  # 32 rows as 16 + 16 and as 10 + 11 + 11; the last batch (5 rows) too
        run = digits_run(handler, dtype, optimiser=optimiser)
        reports = ThreadsOperator(run.trainer, epochs=2, workers=workers).run()
        np.testing.assert_allclose([report.cost for report in reports], expected, rtol=tolerance)
        for pid, array in parameters(single.trainer).items():
            np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=tolerance, atol=tolerance, err_msg=pid)
        assert run.trainer.total_iterations == single.trainer.total_iterations
        assert run.trainer.optimiser.steps == single.trainer.optimiser.steps


def test_resume_from_a_mid_epoch_checkpoint_is_bit_identical_with_dropout(tmp_path):
    operator = {"type": "threads", "workers": 2}
    uninterrupted = digits_run(dropout=True, operator=operator)
    uninterrupted.hooks.append(CheckpointHook(tmp_path, keep=100, every=every(7, "iteration")))
    uninterrupted.train()
    assert isinstance(uninterrupted.history, list) and len(uninterrupted.history) == 2
    saved = [path for path in checkpoints(tmp_path, "digits") if path.name.startswith("digits-e1-")]
    assert saved and not saved[0].name.endswith("-i0.ckpt")  # inside epoch 2 (45 batches an epoch)

    resumed = digits_run(dropout=True, operator=operator)
    resumed.resume(saved[0])
    summary = resumed.train()
    assert summary["epochs"] == 2 and resumed.trainer.total_iterations == uninterrupted.trainer.total_iterations
    for pid, array in parameters(uninterrupted.trainer).items():
        np.testing.assert_array_equal(parameters(resumed.trainer)[pid], array, err_msg=pid)


def test_model_averaging_resumes_exactly_from_an_epoch_checkpoint(tmp_path):
    operator = {"type": "threads", "workers": 2, "combine": "models", "every": 4}
    uninterrupted = digits_run(dropout=True, operator=operator, epochs=3)
    uninterrupted.hooks.append(CheckpointHook(tmp_path, keep=100))  # every epoch: each is a merge
    uninterrupted.train()
    resumed = digits_run(dropout=True, operator=operator, epochs=3)
    resumed.resume(tmp_path / "digits-e1-i0.ckpt")
    resumed.train()
    for pid, array in parameters(uninterrupted.trainer).items():
        np.testing.assert_array_equal(parameters(resumed.trainer)[pid], array, err_msg=pid)


def test_run_file_picks_the_operator_and_checks_its_settings():
    run = digits_run(operator={"type": "threads", "workers": 2, "combine": "models", "every": 5}, epochs=1)
    assert run.train()["epochs"] == 1
    with pytest.raises(ConfigError, match="operator.workers: expected an integer >= 1, got 0"):
        digits_run(operator={"type": "threads", "workers": 0}).train()
    with pytest.raises(ConfigError, match="operator.combine must be one of gradients, models, got 'mean'"):
        digits_run(operator={"type": "threads", "combine": "mean"}).train()


class _Events(Hook):
    def __init__(self, scale, log):
        super().__init__(every(1, scale), parameters={"scale": scale})
        self.scale, self.log = scale, log

    def invoke(self, registry, resolver):
        self.log.append((self.scale, registry["total_iterations"], threading.current_thread().name))


def test_pause_resume_step_reset_stop_and_restart_with_three_workers():
    """Sigma's TestCpuMultithreadedOperator: 3 workers through start, pause, resume, stop and a restart."""
    log = []
    run = digits_run(epochs=10_000)
    initial = parameters(run.trainer)
    operator = ThreadsOperator(run.trainer, epochs=10_000, workers=3,
                               hooks=[_Events(scale, log) for scale in ("start", "pause", "resume", "reset", "stop")])
    operator.start()
    operator.signal_pause()
    assert operator.wait_for_state_changed(10) and operator.state is State.PAUSED
    paused_at = run.trainer.total_iterations
    operator.command("step")
    assert operator.wait_for_state_changed(10) and operator.state is State.PAUSED
    assert run.trainer.total_iterations == paused_at + 1  # one global iteration: every worker did its share
    operator.signal_resume()
    assert operator.wait_for_state_changed(10) and operator.state is State.RUNNING
    operator.signal_pause()
    assert operator.wait_for_state_changed(10)
    operator.signal_reset()
    assert operator.wait_for_state_changed(10) and operator.state is State.PAUSED
    assert run.trainer.total_iterations == 0
    for pid, array in initial.items():
        np.testing.assert_array_equal(parameters(run.trainer)[pid], array)
    operator.signal_stop()
    operator.join(10)
    assert operator.state is State.STOPPED
    assert [scale for scale, *_ in log] == ["start", "pause", "resume", "pause", "resume", "pause", "reset", "stop"]
    assert {name for *_, name in log} == {operator._thread.name}  # hooks run on the training thread, not a worker's

    operator.start()  # a restart continues from where the stop left the trainer
    assert operator.wait_for_state_changed(10) and operator.state is State.RUNNING
    operator.signal_stop()
    operator.join(10)
    assert run.trainer.total_iterations > 0 and log[-1][0] == "stop"


def test_a_worker_exception_reaches_the_driver_naming_the_worker_and_changes_nothing():
    run = digits_run()
    operator = ThreadsOperator(run.trainer, epochs=1, workers=2)

    def broken(shard):
        raise RuntimeError("disk on fire")

    operator.workers[1].trainer.gradients = broken
    before = parameters(run.trainer)
    with pytest.raises(WorkerError, match=r"^worker 1 failed: RuntimeError: disk on fire$"):
        operator.run()
    assert operator.state is State.STOPPED and run.trainer.total_iterations == 0
    for pid, array in before.items():
        np.testing.assert_array_equal(parameters(run.trainer)[pid], array)


def test_a_non_finite_cost_in_one_worker_is_a_non_finite_error_naming_it():
    run = digits_run(operator={"type": "threads", "workers": 2})
    run.trainer.network.load_state_dict({pid: np.full(a.shape, np.inf) if pid.endswith("weights") else a
                                         for pid, a in run.trainer.network.state_dict().items()})
    with pytest.raises(NonFiniteError, match=r"worker 0 failed: NonFiniteError: trainer 'digits/worker0': cost became nan"), \
            np.errstate(all="ignore"):
        run.train()


class _Recorder(Hook):
    """A local hook: records, per worker, the parameters after each of its iterations (class-level: copies share it)."""

    seen: dict = {}

    def __init__(self):
        super().__init__(every(1, "iteration"), parameters={}, requires=("network.layers.*.*",))

    def invoke(self, registry, resolver):
        name = registry["trainer"]["name"]
        self.seen[name] = (registry["total_iterations"], {key: np.array(value) for key, value
                                                          in resolver.resolve_get("network.layers.*.*")})


def test_model_averaging_runs_local_hooks_per_worker_and_merges_their_networks():
    _Recorder.seen.clear()
    run = digits_run(epochs=1)
    merges = []

    class Global(Hook):
        default_target = "global"

        def invoke(self, registry, resolver):
            merges.append(registry["total_iterations"])

    operator = ThreadsOperator(run.trainer, epochs=1, workers=2, combine="models", every=1000,
                               hooks=[_Recorder(), Global(every(1, "epoch"))])
    assert operator.local_hooks and all(hook.target == "global" for hook in operator.hooks)
    operator.run()
    assert sorted(_Recorder.seen) == ["digits/worker0", "digits/worker1"]  # each worker ran its own copy
    last = len(run.trainer.training_iterator)
    (steps0, worker0), (steps1, worker1) = _Recorder.seen["digits/worker0"], _Recorder.seen["digits/worker1"]
    assert steps0 == steps1 == last and merges == [last]
    merged = run.trainer.network.state_dict()
    for key, value in worker0.items():  # merged once, at the epoch's end: the mean of the two local networks
        pid = key.removeprefix("network.layers.")
        assert not np.allclose(value, worker1[key])
        np.testing.assert_allclose(merged[pid], (value + worker1[key]) / 2, rtol=1e-12)
        np.testing.assert_array_equal(operator.workers[1].trainer.network.state_dict()[pid], merged[pid])


def test_model_averaging_merges_every_k_iterations_and_when_stopped():
    run = digits_run(epochs=1)
    operator = ThreadsOperator(run.trainer, epochs=1, workers=2, combine="models", every=3,
                               hooks=[_Stop(after(4, "iteration"))])
    operator.run()
    assert run.trainer.total_iterations == 4 and operator._unmerged == 0  # merged at 3, and again at the stop
    worker = operator.workers[0].trainer
    for pid, array in run.trainer.network.state_dict().items():
        np.testing.assert_array_equal(worker.network.state_dict()[pid], array)
    memory = run.trainer.optimiser.state_dict()["memory"]
    assert memory and all(np.isfinite(a).all() for named in memory.values() for a in named.values())


class _Stop(Hook):
    def invoke(self, registry, resolver):
        self.operator.signal_stop()


def test_blas_runs_one_thread_per_worker_while_training():
    import threadpoolctl

    def blas():
        return {pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"}

    seen, between = [], []

    class Threads(Hook):
        def invoke(self, registry, resolver):
            between.append(blas())

    before = blas()
    run = digits_run(epochs=1)
    operator = ThreadsOperator(run.trainer, epochs=1, workers=2, hooks=[Threads(after(1, "iteration"))])
    for worker in operator.workers:
        worker.trainer.gradients = lambda shard, compute=worker.trainer.gradients: (seen.append(blas()),
                                                                                   compute(shard))[1]
    operator.run()
    assert seen and all(threads == {1} for threads in seen) and between == [{1}]
    assert blas() == before


def test_an_uninitialised_trainer_is_refused():
    run = digits_run()
    run.trainer.handler = None
    with pytest.raises(SigmaError, match="initialise it before building its operator"):
        ThreadsOperator(run.trainer, epochs=1)


def test_an_environment_runs_a_threads_trainer_next_to_a_single_worker_one():
    from sigma_core.environment import Environment

    alone = digits_run(epochs=1)
    ThreadsOperator(alone.trainer, epochs=1, workers=2).run()
    environment = Environment()
    runs = {"a": digits_run(epochs=1), "b": digits_run(epochs=1)}
    runs["a"].trainer.name, runs["b"].trainer.name = "a", "b"
    environment.add_trainer(runs["a"].trainer, runs["a"].handler, epochs=1, operator={"type": "threads", "workers": 2})
    environment.add_trainer(runs["b"].trainer, runs["b"].handler, epochs=1)
    environment.run(concurrent=True)
    assert isinstance(environment.operators["a"], ThreadsOperator)
    assert isinstance(environment.operators["b"], SingleWorkerOperator)
    for pid, array in parameters(alone.trainer).items():
        np.testing.assert_array_equal(parameters(runs["a"].trainer)[pid], array)
    environment = Environment()
    environment.add_trainer(runs["a"].trainer, runs["a"].handler, epochs=2, operator={"type": "threads", "workers": -1})
    with pytest.raises(ConfigError, match=r"^trainer 'a': operator.workers: expected an integer >= 1, got -1$"):
        environment.run()


def test_a_host_handler_shares_a_buffer_without_copying_and_refuses_a_mismatch():
    handler = digits_run().handler  # what workers read the global parameters and add gradients through
    array, buffer = handler.asarray(np.zeros((2, 3))), np.arange(6.0).reshape(2, 3)
    handler.share(array, buffer)
    assert handler.host_view(array) is buffer
    buffer[0, 0] = 7.0
    assert array.to_numpy()[0, 0] == 7.0
    with pytest.raises(SigmaError, match="cannot share a float64 buffer of shape"):
        handler.share(array, np.zeros((3, 2)))

"""The ``threads`` operator: data-parallel workers on one machine, an operator of the loop."""

from __future__ import annotations

import copy
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest
import threadpoolctl

from sigma_core import ConfigError, Loop, NonFiniteError, SigmaError, State, load
from sigma_core import config as run_config
from sigma_core.training.checkpoint import checkpoints
from sigma_core.hooks import Hook
from sigma_core.hooks.checkpoints import CheckpointHook
from sigma_core.run import build_run
from sigmann_threads import ThreadsOperator, WorkerError, shard_bounds

DIGITS = tomllib.loads((Path(__file__).resolve().parents[3] / "examples" / "digits.toml").read_text())


def digits_run(handler="numpy", dtype="float64", dropout=False, epochs=2, operator=None, optimiser=None,
               batch_norm=False):
    raw = copy.deepcopy(DIGITS)
    if not dropout:
        raw["network"]["layers"] = [layer for layer in raw["network"]["layers"] if layer["type"] != "dropout"]
    if batch_norm:  # on the inputs, so that its running statistics depend on the data alone (sigmann-vision)
        raw["network"]["layers"].insert(1, {"type": "batch_norm", "name": "norm"})
    raw["handler"] = {"name": handler, "dtype": dtype}
    raw["training"]["epochs"] = epochs
    raw["operator"] = operator or {}
    raw["optimiser"] = optimiser or raw["optimiser"]
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    return run


def threads(trainer, *, epochs, hooks=(), **settings) -> Loop:
    """A loop whose iterations ``workers`` threads train (ThreadsOperator' settings)."""
    return Loop(trainer, ThreadsOperator(trainer, **settings), epochs=epochs, hooks=hooks)


def parameters(trainer) -> dict:
    return {pid: array.to_numpy().copy() for pid, array in trainer.network.parameters.items()}


class AtIteration(Hook):
    """Calls ``act(hook)`` once, after the run's ``at``-th iteration."""

    def __init__(self, at, act):
        self.at, self.act = at, act

    def on_iteration(self):
        if self.run.values["total_iterations"] == self.at:
            self.act(self)


def test_shards_cover_the_batch_in_worker_order():
    assert shard_bounds(10, 3) == [0, 3, 6, 10]
    assert shard_bounds(2, 3) == [0, 0, 1, 2]  # fewer records than workers: the first worker sits this one out


# The workers add up the same gradients as one worker does, in another order (per shard, then weighted shard sums),
# so the runs differ by rounding alone. Reordering a sum of n terms changes it by at most n·u·Σ|terms| (Higham,
# u = eps/2); every parameter ends T steps of B-row gradient sums, T·B rounded additions, whose terms the largest
# parameter bounds: tolerance eps·T·B·max|parameter| (so c = 1, with a factor 2 to spare). Float32 is SGD: Adam
# divides by the root of tiny second moments (digits has pixels that are always 0), which amplifies rounding.
# Weighting the 10/11/11 shards equally instead misses by 2 (float32) and 0.06 (float64), far outside.
@pytest.mark.parametrize("handler, dtype, optimiser", [
    ("numpy", "float64", None), ("cpu", "float32", {"type": "sgd", "learning_rate": 0.1})])
def test_gradient_averaging_gives_one_worker_on_the_whole_batch(handler, dtype, optimiser):
    single = digits_run(handler, dtype, optimiser=optimiser)
    expected = [report.cost for report in Loop(single.trainer, epochs=2).run()]
    alone = parameters(single.trainer)
    steps, rows = single.trainer.total_iterations, single.config["training"]["batch_size"]
    depth = np.finfo(dtype).eps * steps * rows
    atol = depth * max(float(np.abs(array).max()) for array in alone.values())
    for workers in (2, 3):  # 32 rows as 16 + 16 and as 10 + 11 + 11; the last batch (5 rows) too
        run = digits_run(handler, dtype, optimiser=optimiser)
        reports = threads(run.trainer, epochs=2, workers=workers).run()
        np.testing.assert_allclose([report.cost for report in reports], expected, rtol=depth)  # a mean over rows
        for pid, array in alone.items():
            np.testing.assert_allclose(parameters(run.trainer)[pid], array, rtol=0, atol=atol, err_msg=pid)
        assert run.trainer.total_iterations == single.trainer.total_iterations
        assert run.trainer.optimiser.steps == single.trainer.optimiser.steps


def test_resume_from_a_mid_epoch_checkpoint_is_bit_identical_with_dropout(tmp_path):
    operator = {"type": "threads", "workers": 2}
    uninterrupted = digits_run(dropout=True, operator=operator)
    uninterrupted.hooks.append(CheckpointHook(tmp_path, keep=100, every=7))
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


def running_statistics(run, epochs: int, workers: int, weighted: bool, momentum: float = 0.1) -> dict:
    """Batch norm's running statistics on the inputs as the merge rule says, in float64: every step each worker's
    shard moves the last merged ones (PyTorch's update: the unbiased shard variance), and the trainer's are their
    mean, weighted by the shards' shares of the records (gradient averaging) or plain (model averaging: the update
    is linear in the batch statistics, so merging every k steps gives what merging every step does)."""
    mean, var = np.zeros(64), np.ones(64)
    for _ in range(epochs):
        for batch in run.trainer.training_iterator:  # a fresh run's: the same batches in the same order
            rows = batch["inputs"].astype(np.float64)
            bounds = shard_bounds(len(rows), workers)
            shards = [rows[start:stop] for start, stop in zip(bounds, bounds[1:]) if stop > start]
            weights = [len(shard) / len(rows) if weighted else 1 / len(shards) for shard in shards]
            mean = (1 - momentum) * mean + momentum * sum(w * shard.mean(0) for w, shard in zip(weights, shards))
            var = (1 - momentum) * var + momentum * sum(w * shard.var(0, ddof=1) for w, shard in zip(weights, shards))
    return {"norm.running_mean": mean, "norm.running_var": var}


def state(trainer) -> dict:
    return {key: array.to_numpy().copy() for key, array in trainer.network.state.items()}


# Layer state merges as the parameters do: after every step (gradient averaging, weighted by the shards' shares) or
# every k (model averaging, plain mean), so the trainer's running statistics, which evaluation and checkpoints use,
# are the workers'. Each is a running average of T·B rows' statistics with weights summing to 1, whose terms the
# inputs bound (pixels in [0, 1], so |x| and x² <= 1): summing them in another order moves it by at most
# eps·T·B (Higham; the per-step rounding of the in-place updates is within it). The plain mean instead of the
# shares misses by 5e-4 with 2 workers and 2e-3 with 3 (the 29-row last batch splits 14 + 15 and 9 + 10 + 10),
# outside even float32's bound; the statistics left where they started (what the trainer held before layer state
# was merged) miss by 0.75.
@pytest.mark.parametrize("handler, dtype, operator", [
    ("numpy", "float64", {"type": "threads", "workers": 2}),
    ("numpy", "float64", {"type": "threads", "workers": 3}),
    ("cpu", "float32", {"type": "threads", "workers": 2}),
    ("numpy", "float64", {"type": "threads", "workers": 2, "combine": "models", "every": 4})])
def test_the_trainer_holds_the_merged_running_statistics_and_resumes_them_exactly(tmp_path, handler, dtype, operator):
    models = operator.get("combine") == "models"
    uninterrupted = digits_run(handler, dtype, operator=operator, batch_norm=True)
    uninterrupted.hooks.append(CheckpointHook(tmp_path, keep=100))  # every epoch's end
    if not models:
        uninterrupted.hooks.append(CheckpointHook(tmp_path, keep=100, every=7))
    uninterrupted.train()
    steps, rows = uninterrupted.trainer.total_iterations, uninterrupted.config["training"]["batch_size"]
    expected = running_statistics(digits_run(handler, dtype, batch_norm=True), 2, operator["workers"], not models)
    for key, value in state(uninterrupted.trainer).items():
        np.testing.assert_allclose(value, expected[key], rtol=0, atol=np.finfo(dtype).eps * steps * rows, err_msg=key)

    # Resumed mid-epoch (gradient averaging: every step is a merge) or at an epoch's end (model averaging's merge).
    saved = tmp_path / "digits-e1-i0.ckpt" if models else [
        path for path in checkpoints(tmp_path, "digits") if path.name.startswith("digits-e1-i")
        and not path.name.endswith("-i0.ckpt")][0]
    resumed = digits_run(handler, dtype, operator=operator, batch_norm=True)
    resumed.resume(saved)
    resumed.train()
    final = uninterrupted.trainer.network.state_dict()
    for key, value in resumed.trainer.network.state_dict().items():  # parameters and running statistics
        np.testing.assert_array_equal(value, final[key], err_msg=key)

    # The last checkpoint holds them, and prediction from it (inference mode: the running statistics) is the
    # trainer's own, bit for bit.
    network = load(tmp_path / "digits-e2-i0.ckpt", handler=handler)
    for key, value in state(uninterrupted.trainer).items():
        np.testing.assert_array_equal(network.state[key].to_numpy(), value, err_msg=key)
    images = np.random.default_rng(0).integers(0, 17, (50, 64)).astype(dtype)  # raw pixels, 0..16
    np.testing.assert_array_equal(network.predict(images), uninterrupted.trainer.network.predict(images))


def test_run_file_picks_the_operator_and_checks_its_settings():
    run = digits_run(operator={"type": "multithreaded", "workers": 2, "combine": "models", "every": 5}, epochs=1)
    assert run.train()["epochs"] == 1
    with pytest.raises(ConfigError, match="operator.workers: expected an integer >= 1, got 0"):
        digits_run(operator={"type": "threads", "workers": 0}).train()
    with pytest.raises(ConfigError, match="operator.combine: expected one of gradients, models, got 'mean'"):
        digits_run(operator={"type": "threads", "combine": "mean"}).train()


class _Events(Hook):
    def __init__(self, log):
        self.log = log

    def _record(self, event):
        self.log.append((event, self.run.values["total_iterations"], threading.current_thread().name))

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


def test_pause_resume_step_reset_stop_and_restart_with_three_workers():
    """Sigma's TestCpuMultithreadedOperator: 3 workers through start, pause, resume, stop and a restart."""
    log = []
    run = digits_run(epochs=10_000)
    initial = parameters(run.trainer)
    loop = threads(run.trainer, epochs=10_000, workers=3, hooks=[_Events(log)])
    loop.start()
    loop.signal_pause()
    assert loop.wait_for_state_changed(10) and loop.state is State.PAUSED
    paused_at = run.trainer.total_iterations
    loop.command("step")
    assert loop.wait_for_state_changed(10) and loop.state is State.PAUSED
    assert run.trainer.total_iterations == paused_at + 1  # one global iteration: every worker did its share
    loop.signal_resume()
    assert loop.wait_for_state_changed(10) and loop.state is State.RUNNING
    loop.signal_pause()
    assert loop.wait_for_state_changed(10)
    loop.signal_reset()
    assert loop.wait_for_state_changed(10) and loop.state is State.PAUSED
    assert run.trainer.total_iterations == 0
    for pid, array in initial.items():
        np.testing.assert_array_equal(parameters(run.trainer)[pid], array)
    loop.signal_stop()
    loop.join(10)
    assert loop.state is State.STOPPED
    assert [event for event, *_ in log] == ["start", "pause", "resume", "pause", "resume", "pause", "reset", "stop"]
    assert {name for *_, name in log} == {loop._thread.name}  # hooks run on the training thread, not a worker's

    loop.start()  # a restart continues from where the stop left the trainer
    assert loop.wait_for_state_changed(10) and loop.state is State.RUNNING
    loop.signal_stop()
    loop.join(10)
    assert run.trainer.total_iterations > 0 and log[-1][0] == "stop"


def test_a_worker_exception_reaches_the_driver_naming_the_worker_and_changes_nothing():
    run = digits_run()
    loop = threads(run.trainer, epochs=1, workers=2)

    def broken(shard):
        raise RuntimeError("disk on fire")

    loop.operator.workers[1].trainer.gradients = broken
    before = parameters(run.trainer)
    with pytest.raises(WorkerError, match=r"^worker 1 failed: RuntimeError: disk on fire$"):
        loop.run()
    assert loop.state is State.STOPPED and run.trainer.total_iterations == 0
    for pid, array in before.items():
        np.testing.assert_array_equal(parameters(run.trainer)[pid], array)


def test_a_non_finite_cost_in_one_worker_is_a_non_finite_error_naming_it():
    run = digits_run(operator={"type": "threads", "workers": 2})
    run.trainer.network.load_state_dict({pid: np.full(a.shape, np.inf) if pid.endswith("weights") else a
                                         for pid, a in run.trainer.network.state_dict().items()})
    with pytest.raises(NonFiniteError, match=r"worker 0 failed: NonFiniteError: trainer 'digits/worker0': cost became nan"), \
            np.errstate(all="ignore"):
        run.train()


def test_model_averaging_merges_the_workers_networks_at_the_epochs_end():
    run = digits_run(epochs=1)
    loop = threads(run.trainer, epochs=1, workers=2, combine="models", every=1000)
    last = {}  # worker index -> (its step, its network) after each of its own steps
    for worker in loop.operator.workers:
        def train(shard, counters, worker=worker, step=worker.train):
            cost = step(shard, counters)
            last[worker.index] = (counters[0], worker.trainer.network.state_dict())
            return cost
        worker.train = train
    before = parameters(run.trainer)
    unchanged = []

    class Unchanged(Hook):
        def on_iteration(self):  # between merges the global state stays as it was
            unchanged.append(all(np.array_equal(array, before[pid])
                                 for pid, array in parameters(self.run.trainer).items()))

    loop.attach_hook(Unchanged())
    loop.run()
    steps = len(run.trainer.training_iterator)
    assert unchanged == [True] * steps  # no merge before the epoch's end (every = 1000)
    (step0, worker0), (step1, worker1) = last[0], last[1]
    assert step0 == step1 == steps - 1
    merged = run.trainer.network.state_dict()
    for pid, value in worker0.items():  # merged once, at the epoch's end: the mean of the two local networks
        assert not np.allclose(value, worker1[pid])
        np.testing.assert_array_equal(merged[pid], (value + worker1[pid]) / 2)
        np.testing.assert_array_equal(loop.operator.workers[1].trainer.network.state_dict()[pid], merged[pid])


def test_model_averaging_merges_every_k_iterations_and_when_stopped():
    run = digits_run(epochs=1)
    loop = threads(run.trainer, epochs=1, workers=2, combine="models", every=3,
                   hooks=[AtIteration(4, lambda hook: hook.run.command("stop"))])
    loop.run()
    assert run.trainer.total_iterations == 4  # merged at 3, and again at the stop: the workers hold the merge
    worker = loop.operator.workers[0].trainer
    for pid, array in run.trainer.network.state_dict().items():
        np.testing.assert_array_equal(worker.network.state_dict()[pid], array)
    memory = run.trainer.optimiser.state_dict()["memory"]
    assert memory and all(np.isfinite(a).all() for named in memory.values() for a in named.values())


def test_blas_runs_one_thread_per_worker_while_training():
    def blas():
        return {pool["num_threads"] for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"}

    seen, between = [], []
    before = blas()
    run = digits_run(epochs=1)
    loop = threads(run.trainer, epochs=1, workers=2, hooks=[AtIteration(1, lambda hook: between.append(blas()))])
    for worker in loop.operator.workers:
        worker.trainer.gradients = lambda shard, compute=worker.trainer.gradients: (seen.append(blas()),
                                                                                   compute(shard))[1]
    loop.run()
    assert seen and all(threads == {1} for threads in seen) and between == [{1}]
    assert blas() == before


def test_an_uninitialised_trainer_is_refused():
    run = digits_run()
    run.trainer.handler = None
    with pytest.raises(SigmaError, match="initialise it before building its operator"):
        ThreadsOperator(run.trainer)


def test_a_threads_trainer_runs_next_to_a_single_worker_one():
    alone = digits_run(epochs=1)
    threads(alone.trainer, epochs=1, workers=2).run()
    runs = {"a": digits_run(epochs=1), "b": digits_run(epochs=1)}
    loops = [threads(runs["a"].trainer, epochs=1, workers=2), Loop(runs["b"].trainer, epochs=1)]
    for loop in loops:  # each trains on its own thread, at the same time
        loop.start()
    for loop in loops:
        loop.join()
    for pid, array in parameters(alone.trainer).items():
        np.testing.assert_array_equal(parameters(runs["a"].trainer)[pid], array)


def test_a_host_handler_shares_a_buffer_without_copying_and_refuses_a_mismatch():
    handler = digits_run().handler  # what workers read the global parameters and add gradients through
    array, buffer = handler.asarray(np.zeros((2, 3))), np.arange(6.0).reshape(2, 3)
    handler.share(array, buffer)
    assert handler.host_view(array) is buffer
    buffer[0, 0] = 7.0
    assert array.to_numpy()[0, 0] == 7.0
    with pytest.raises(SigmaError, match="cannot share a float64 buffer of shape"):
        handler.share(array, np.zeros((3, 2)))


def test_a_partial_load_writes_the_layer_state_alone_in_place_and_refuses_an_unknown_id():
    network = digits_run(batch_norm=True).trainer.network  # what the workers exchange the layer state through
    before, array = network.state_dict(), network.state["norm.running_mean"]
    network.load_state_dict({"norm.running_mean": np.full(64, 0.5)}, partial=True)
    assert network.state["norm.running_mean"] is array and np.array_equal(array.to_numpy(), np.full(64, 0.5))
    for key, value in network.state_dict().items():
        if key != "norm.running_mean":
            np.testing.assert_array_equal(value, before[key], err_msg=key)
    with pytest.raises(SigmaError, match=r"missing none, unexpected \['norm\.running_mode'\]"):
        network.load_state_dict({"norm.running_mode": np.zeros(64)}, partial=True)
    with pytest.raises(SigmaError, match=r"missing \['norm\.running_mean'\]"):  # without partial: every id
        network.load_state_dict({key: value for key, value in before.items() if key != "norm.running_mean"})

"""The CUDA handler on a real device: every test here skips, with the handler's reason, where none is.

The conformance kit of sigmann-testing (float32 and float64, every op and gradient,
plugin ops included, against the numpy handler), the built-in layers' gradients,
end-to-end training, checkpoints crossing handlers, and the contract's
device-specific promises: a warm step allocates nothing, queues without waiting
for the device, skips its update after a non-finite cost and says so at the next
read, and dropout is reproducible; all of it for recorded steps replayed as CUDA
graphs (:mod:`sigma_cuda.graphs`) too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy
import pytest

from sigma_core import cli, plugins

from sigma_core.compute import backend
from sigma_core.model.architecture import Construct
from sigma_core.model.constructs import Input, SoftmaxCE
from sigma_core.errors import NonFiniteError, ShapeError, SigmaError
from sigma_core.compute.kernels import ArrayKernels
from sigma_core.model.network import Network
from sigma_core.training.optimisers import Adam
from sigma_core.training.trainer import Trainer
from sigmann_testing import HandlerConformance, check_layer


def _availability():
    plugins.reset()
    try:
        return backend.handler_availability("cuda")
    finally:
        plugins.reset()


AVAILABLE, REASON = _availability()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not AVAILABLE, reason=f"cuda handler unavailable: {REASON}")]

ROOT = Path(__file__).resolve().parents[2]
MNIST = next((p for p in (os.environ.get("SIGMA_MNIST_DIR"), ROOT / ".gpu_data" / "mnist", ROOT.parent / "shared" / "data" / "mnist")
              if p and Path(p).exists()), None)


def cuda(dtype="float32", seed=0):
    from sigma_cuda.handler import CudaHandler

    return CudaHandler(dtype, seed)


class TestCudaConformance(HandlerConformance):
    handler_factory = staticmethod(cuda)


# -- layers and whole runs -------------------------------------------------------------------------
LAYERS = [
    ("dense", [(4,)], {"size": 5, "activation": "tanh"}),
    ("dense", [(4,)], {"size": 5, "activation": "relu"}),
    ("dense", [(2, 3)], {"size": 3, "activation": "sigmoid"}),
    ("dense", [(4,)], {"size": 3, "activation": "softplus"}),
    ("dropout", [(6,)], {"p": 0.3}),
    ("elementwise", [(4,)], {}),
    ("recurrent", [(4, 3)], {"size": 3}),
    ("lstm", [(4, 3)], {"size": 3}),
    ("concatenate", [(3,), (2,)], {}),
    ("add", [(3,), (3,)], {}),
    ("output", [(3,)], {}),
]


@pytest.mark.parametrize("layer, input_shapes, arguments", LAYERS, ids=[f"{t[0]}-{i}" for i, t in enumerate(LAYERS)])
def test_layer_gradients_and_agreement_with_numpy(layer, input_shapes, arguments):
    outputs = check_layer(layer, input_shapes, handlers=["numpy", "cuda"], **arguments)
    assert set(outputs) == {"numpy", "cuda"}


def _train(tmp_path, example, *extra, name="result"):
    out = tmp_path / f"{name}.json"
    code = cli.main(["train", str(ROOT / "examples" / f"{example}.toml"), "--quiet", "--out", str(out), *extra])
    assert code == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_digits_example_learns_on_cuda(tmp_path, dtype):
    result = _train(tmp_path, "digits", "--handler", "cuda", "--dtype", dtype, "--set", "training.epochs=8")
    assert result["accuracy"] >= 0.93


@pytest.mark.slow
@pytest.mark.skipif(MNIST is None, reason="no MNIST test set (SIGMA_MNIST_DIR, .gpu_data/mnist or ../shared/data/mnist)")
def test_mnist_example_reaches_95_percent_on_cuda(tmp_path):
    result = _train(tmp_path, "mnist", "--handler", "cuda", "--set", f"data.directory={MNIST}")
    assert result["epochs"] == 10 and result["accuracy"] >= 0.95


def test_a_checkpoint_written_on_cuda_resumes_on_numpy_and_back(tmp_path):
    def run(handler, epochs, directory, resume=None):
        extra = ["--handler", handler, "--set", f"training.epochs={epochs}", "--set",
                 f"checkpoint.directory={json.dumps(str(tmp_path / directory))}", "--set", "checkpoint.every_epochs=1"]
        return _train(tmp_path, "digits", *extra, *(["--resume", str(tmp_path / resume)] if resume else []),
                      name=directory)

    first = run("cuda", 2, "on-cuda")
    second = run("numpy", 4, "on-numpy", resume="on-cuda")
    third = run("cuda", 6, "back-on-cuda", resume="on-numpy")
    assert [len(r["history"]) for r in (first, second, third)] == [2, 2, 2]  # each continued where the last stopped
    assert third["epochs"] == 6 and third["accuracy"] >= 0.93 and third["accuracy"] >= first["accuracy"] - 0.02


# -- the device-specific contract --------------------------------------------------------------------
def _digits_trainer(handler, dropout=0.2, replay=False, last_batch="drop"):
    from sigmann_sklearn.datasets import load_sklearn

    from sigma_core.data import MinibatchIterator

    layers = Input(64) + Construct("dense", size=32, activation="relu")
    if dropout:
        layers = layers + Construct("dropout", p=dropout)
    network = Network(layers + Construct("dense", size=10) + SoftmaxCE())
    trainer = Trainer(network, Adam(0.01, weight_decay=0.001), MinibatchIterator(load_sklearn("digits"), 50,
                      last_batch=last_batch, seed=0))
    trainer.initialise(handler)
    if replay:  # recorded steps, captured as CUDA graphs
        from sigmann_replay import StepReplay

        trainer.compile_step(StepReplay.compile)
    return trainer, iter(trainer.training_iterator)


REPLAY = pytest.mark.parametrize("replay", [False, True], ids=["unrecorded", "graph-replay"])


@REPLAY
def test_a_warm_training_step_allocates_no_device_memory(replay):
    import cupy

    handler = cuda()
    trainer, batches = _digits_trainer(handler, replay=replay)
    for _ in range(3):
        trainer.run_iteration(next(batches))
    pool, asked = cupy.get_default_memory_pool(), []

    def counting(size):
        asked.append(size)
        return pool.malloc(size)

    before = handler.allocations
    cupy.cuda.set_allocator(counting)
    try:
        for _ in range(10):
            trainer.run_iteration(next(batches))
    finally:
        cupy.cuda.set_allocator(pool.malloc)
    assert asked == [], f"{len(asked)} device allocations in 10 warm steps: {asked[:10]} bytes"
    assert handler.allocations == before
    assert numpy.isfinite(trainer.last_cost)


BUSY = r"""
extern "C" __global__ void busy(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


@REPLAY
def test_training_steps_queue_behind_a_busy_device_without_waiting(replay):
    """Nothing on the hot path syncs: with the device held busy for a second, three steps return at once."""
    import cupy

    handler = cuda()
    trainer, batches = _digits_trainer(handler, replay=replay)
    for _ in range(3):
        trainer.run_iteration(next(batches))
    cupy.cuda.Device().synchronize()
    busy = cupy.RawKernel(BUSY, "busy")
    started = time.perf_counter()
    busy((1,), (1,), (numpy.uint64(1_000_000_000),))
    for _ in range(3):
        trainer.run_iteration(next(batches))
    queued = time.perf_counter() - started
    cupy.cuda.Device().synchronize()
    finished = time.perf_counter() - started
    assert finished >= 0.9, "the busy kernel did not hold the device"
    assert queued < 0.5, f"three steps took {queued:.3f} s behind a busy device: something waits for it"
    assert numpy.isfinite(trainer.last_cost)


@REPLAY
def test_a_non_finite_cost_skips_the_updates_and_is_raised_at_the_next_read(replay):
    from sigmann_replay import StepReplay

    handler = cuda()
    trainer, batches = _digits_trainer(handler, dropout=0.0, replay=replay)
    for _ in range(3 if replay else 1):  # with replay: the next steps are graph launches
        trainer.run_iteration(next(batches))
    before = trainer.network.state_dict()
    bad = dict(next(batches))
    bad["inputs"] = numpy.array(bad["inputs"])  # its dtype kept: the same signature, replayed
    bad["inputs"][0, 0] = numpy.nan
    trainer.run_iteration(bad)  # returns at once: the check is on the device
    trainer.run_iteration(next(batches))  # skipped as well: the flag holds until the host has seen it
    with pytest.raises(NonFiniteError, match="cost became non-finite"):
        trainer.network.state_dict()
    after = trainer.network.state_dict()  # raised once; now readable
    for key, value in before.items():
        numpy.testing.assert_array_equal(after[key], value, err_msg=key)
    trainer.run_iteration(next(batches))
    assert any(not numpy.array_equal(trainer.network.state_dict()[k], v) for k, v in before.items())
    assert not replay or StepReplay.of(trainer).replayed == 4


def test_uploaded_labels_are_range_checked_from_the_host_copy(monkeypatch):
    handler = cuda()

    def no_device_read(self, labels):
        raise AssertionError("label_range read the labels back from the device")

    monkeypatch.setattr(ArrayKernels, "label_range", no_device_read)
    logits = handler.zeros((4, 3))
    with handler.session():
        cost = handler.softmax_cross_entropy(logits, handler.adopt(numpy.array([0, 2, 1, 2])))
        with pytest.raises(ShapeError, match="class label 3 is outside 0..2"):
            handler.softmax_cross_entropy(logits, handler.adopt(numpy.array([0, 3, 1, 2])))
    assert cost.value == pytest.approx(numpy.log(3.0), rel=1e-6)


def test_costs_match_numpy_through_the_upload_path():
    """Batches through pinned memory and the copy stream, in float64: the same training as the numpy handler's."""
    costs = {}
    for name in ("numpy", "cuda"):
        handler = backend.create_handler(name, dtype="float64", seed=0)
        trainer, batches = _digits_trainer(handler, dropout=0.0)
        costs[name] = [float(trainer.run_iteration(next(batches))) for _ in range(8)]
    numpy.testing.assert_allclose(costs["cuda"], costs["numpy"], rtol=1e-7)


def test_dropout_is_reproducible_from_the_seed_and_matches_the_cpu_handler():
    x = numpy.random.default_rng(1).uniform(0.5, 1.5, (64, 300))

    def masks(handler, calls=3):
        array = handler.asarray(x)
        return [handler.dropout(array, 0.4).to_numpy() for _ in range(calls)]

    first, again, other = masks(cuda(seed=7)), masks(cuda(seed=7)), masks(cuda(seed=8))
    for a, b, c in zip(first, again, other):
        numpy.testing.assert_array_equal(a, b)
        assert not numpy.array_equal(a, c)
    assert not numpy.array_equal(first[0], first[1])  # each call draws afresh
    assert abs((first[0] != 0).mean() - 0.6) < 0.02
    handler = cuda(seed=7)
    handler.dropout(handler.asarray(x), 0.4)
    state = json.loads(json.dumps(handler.rng_state()))
    second = handler.dropout(handler.asarray(x), 0.4).to_numpy()
    handler.set_rng_state(state)
    numpy.testing.assert_array_equal(handler.dropout(handler.asarray(x), 0.4).to_numpy(), second)
    numpy.testing.assert_array_equal(second, first[1])
    try:
        from sigma_cpu.handler import NumbaHandler
    except ImportError:
        return
    on_cpu = masks(NumbaHandler("float32", 7))
    for a, b in zip(first, on_cpu):
        numpy.testing.assert_array_equal(a != 0, b != 0)  # the same counter-based generator, bit for bit
        numpy.testing.assert_allclose(a, b, rtol=1e-6)


def test_device_selection_and_a_missing_device():
    import cupy

    assert backend.create_handler("cuda:0").device.id == 0
    count = cupy.cuda.runtime.getDeviceCount()
    with pytest.raises(SigmaError, match=rf"^handler 'cuda:{count}': there is no CUDA device {count} \("):
        backend.create_handler(f"cuda:{count}")


def test_out_of_memory_names_the_op_and_the_bytes():
    handler = cuda()
    with pytest.raises(SigmaError, match=r"out of memory in full: 4,398,046,511,104 bytes asked for a \(1099511627776,\)"):
        handler.zeros((2**40,))


# -- recorded steps as CUDA graphs (sigma_cuda.graphs) ---------------------------------------------------
def _state_bytes(trainer) -> dict:
    state = trainer.optimiser.state_dict()
    return {**{k: v.tobytes() for k, v in trainer.network.state_dict().items()},
            **{(pid, name): v.tobytes() for pid, memory in state["memory"].items() for name, v in memory.items()},
            "steps": (state["steps"], state["parameter_steps"], trainer.handler.rng_state())}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_graph_replayed_steps_are_bit_identical_with_a_schedule_dropout_and_a_short_last_batch(dtype):
    """The first thing to check on a GPU: capture works, and replay gives every bit of unrecorded steps."""
    from sigma_cuda.graphs import GraphStep
    from sigmann_replay import StepReplay

    runs = {}
    for replay in (False, True):
        trainer, _ = _digits_trainer(cuda(dtype, seed=3), replay=replay, last_batch="keep")  # 1,797 = 35·50 + 47
        costs = []
        for _ in range(2):
            trainer.run_epoch(lambda t: (costs.append(t.last_cost), setattr(t.optimiser, "learning_rate",
                                                                            t.optimiser.learning_rate * 0.97)))
        runs[replay] = (costs, _state_bytes(trainer), trainer)
    assert runs[False][:2] == runs[True][:2]
    replay = StepReplay.of(runs[True][2])
    assert replay.replayed == 2 * 36 - 4  # all but the first two steps of each of the two signatures
    assert all(isinstance(entry.captured, GraphStep) for entry in replay.cache.values())


def test_a_step_replayed_as_a_graph_is_one_graph_launch():
    """No kernel is launched from Python in a replayed step: RawKernel launches are counted, graph launches run."""
    from sigmann_replay import StepReplay

    handler = cuda()
    trainer, batches = _digits_trainer(handler, replay=True)
    for _ in range(3):
        trainer.run_iteration(next(batches))
    counted = []
    for table in (handler.kernels._k, handler.kernels._read, handler.kernels._labelled):  # shared with kernels.updates
        for name, kernel in list(table.items()):
            def launch(*args, kernel=kernel, name=name):
                counted.append(name)
                return kernel(*args)
            table[name] = launch
    replayed = StepReplay.of(trainer).replayed
    for _ in range(5):
        trainer.run_iteration(next(batches))
    assert StepReplay.of(trainer).replayed == replayed + 5 and counted == []
    assert numpy.isfinite(trainer.last_cost)

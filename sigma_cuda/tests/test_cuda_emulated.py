"""The cuda handler's Python side on the emulated CuPy of :mod:`sigma_cuda.emulation`. NOT a GPU check: it runs
everywhere, without CuPy.

The real :mod:`sigma_cuda.handler`, :mod:`sigma_cuda.kernels`, :mod:`sigma_cuda.upload` and
:mod:`sigma_cuda.graphs` run on a stand-in that refuses what real CuPy refuses (see its docstring), each
``kernels.cu`` kernel replaced by a NumPy transcription checked against the kernel's C signature. So
this checks every kernel's arithmetic against the numpy handler through the conformance kit of
sigmann-testing, and what is easy to get wrong between Python, CuPy and CUDA; what it cannot catch is
a bug in the CUDA code itself or in CuPy: that is what ``test_cuda_gpu.py`` is for.
"""

from __future__ import annotations

import threading

import numpy
import pytest

from sigma_core import Adam, Construct, Input, MinibatchIterator, Network, NonFiniteError, NumpyHandler, SoftmaxCE, Trainer
from sigmann_testing import HandlerConformance, check_layer

from sigma_cuda.emulation import PinnedMemoryPointer
from sigma_cuda.emulation import emulated_cupy  # noqa: F401 (the stand-in, autouse: for every test here)


def emulated_cuda(dtype="float32", seed=0, device=0):
    from sigma_cuda.handler import CudaHandler

    return CudaHandler(dtype, seed, device)


class TestEmulatedCudaConformance(HandlerConformance):
    handler_factory = staticmethod(emulated_cuda)


def _trainer(handler, dropout=0.2, *, replay=False, optimiser=None, size=50, last_batch="drop", layers=None,
             shape=(64,)):
    """A trainer on the digits (1,797 records of ``shape``, in batches of ``size``) and an iterator over its first
    epoch. Records are never reshaped for an input layer, so an 8×8 input gets the digits reshaped here."""
    if layers is None:
        layers = Input(64) + Construct("dense", size=32, activation="relu")
        if dropout:
            layers = layers + Construct("dropout", p=dropout)
        layers = layers + Construct("dense", size=10, activation="sigmoid") + SoftmaxCE()
    trainer = Trainer(Network(layers), optimiser or Adam(0.01),
                      MinibatchIterator(_digits(shape), size, last_batch=last_batch, seed=0))
    trainer.initialise(handler)
    if replay:  # recorded steps, captured as CUDA graphs
        from sigmann_replay import StepReplay

        trainer.compile_step(StepReplay.compile)
    return trainer, iter(trainer.training_iterator)


def _digits(shape):
    from sigmann_sklearn.datasets import load_sklearn

    from sigma_core import Dataset

    digits = load_sklearn("digits")
    inputs = digits.section("inputs")
    return Dataset({"inputs": inputs.reshape(len(inputs), *shape), "targets": digits.section("targets")}, "digits")


def test_training_through_uploads_matches_numpy_and_allocates_nothing_when_warm():
    costs = {}
    for name, handler in (("numpy", NumpyHandler("float64", 0)), ("cuda", emulated_cuda("float64"))):
        trainer, batches = _trainer(handler, dropout=0.0)
        costs[name] = [float(trainer.run_iteration(next(batches))) for _ in range(3)]
        warm = handler.allocations
        costs[name] += [float(trainer.run_iteration(next(batches))) for _ in range(5)]
        assert handler.allocations == warm, name
    numpy.testing.assert_allclose(costs["cuda"], costs["numpy"], rtol=1e-12)
    assert costs["cuda"][-1] < costs["cuda"][0]


def test_uploads_go_through_pinned_slots_used_by_turns():
    handler = emulated_cuda()
    trainer, batches = _trainer(handler)
    for _ in range(6):
        trainer.run_iteration(next(batches))
    slots = handler.kernels.uploader._slots
    assert sorted(len(s) for s in slots.values()) == [2, 2]  # inputs and labels, two slots each, taken by turns
    assert {slot.session for s in slots.values() for slot in s} == {5, 6}


def test_pinned_batches_from_the_prefetching_iterator_are_uploaded_without_a_host_copy():
    from sigma_core.data import PrefetchIterator

    handler = emulated_cuda()
    trainer, _ = _trainer(handler)
    prefetching = PrefetchIterator(trainer.training_iterator, prepare=handler.pin_batch)
    batches = iter(prefetching)
    first = next(batches)
    assert first["inputs"].dtype == handler.dtype and first["targets"].dtype.kind == "i"
    assert all(isinstance(v.base, PinnedMemoryPointer) for v in first.values())
    costs = [float(trainer.run_iteration(first))] + [float(trainer.run_iteration(next(batches))) for _ in range(4)]
    batches.close()
    slots = [slot for group in handler.kernels.uploader._slots.values() for slot in group]
    assert slots and all(slot.host is None and isinstance(slot.source.base, PinnedMemoryPointer) for slot in slots)
    plain, batches = _trainer(emulated_cuda())
    assert [float(plain.run_iteration(next(batches))) for _ in range(5)] == costs  # the same batches, the same steps


def test_dropout_draws_the_same_bits_as_the_cpu_handler():
    pytest.importorskip("numba")
    from sigma_cpu.handler import NumbaHandler

    x = numpy.random.default_rng(1).uniform(0.5, 1.5, (32, 50))
    ours, theirs = emulated_cuda("float32", 7), NumbaHandler("float32", 7)
    for _ in range(3):
        a = ours.dropout(ours.asarray(x), 0.4).to_numpy()
        b = theirs.dropout(theirs.asarray(x), 0.4).to_numpy()
        numpy.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("replay", [False, True], ids=["unrecorded", "graph-replay"])
def test_a_non_finite_cost_skips_updates_until_read(replay):
    from sigmann_replay import StepReplay

    handler = emulated_cuda()
    trainer, batches = _trainer(handler, dropout=0.0, replay=replay)
    for _ in range(3):  # with replay, the third step and the next ones are CUDA graph launches
        trainer.run_iteration(next(batches))
    before = trainer.network.state_dict()
    batch = next(batches)
    trainer.run_iteration(dict(batch, inputs=numpy.full_like(batch["inputs"], numpy.nan)))
    trainer.run_iteration(next(batches))
    with pytest.raises(NonFiniteError, match="cost became non-finite"):
        trainer.network.state_dict()
    for key, value in trainer.network.state_dict().items():
        numpy.testing.assert_array_equal(value, before[key], err_msg=key)
    trainer.run_iteration(next(batches))
    assert any(not numpy.array_equal(v, before[k]) for k, v in trainer.network.state_dict().items())
    assert not replay or StepReplay.of(trainer).replayed == 4


@pytest.mark.parametrize("layer, shapes, arguments", [
    ("dense", [(4,)], {"size": 5, "activation": "relu"}), ("dense", [(2, 3)], {"size": 3, "activation": "softplus"}),
    ("dropout", [(6,)], {"p": 0.3}), ("lstm", [(4, 3)], {"size": 3}), ("concatenate", [(3,), (2,)], {})])
def test_built_in_layers_agree_with_numpy_and_have_right_gradients(layer, shapes, arguments):
    assert set(check_layer(layer, shapes, handlers=["numpy", "cuda"], **arguments)) == {"numpy", "cuda"}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_of_a_non_contiguous_view_takes_the_generic_path(dtype):
    logits = numpy.random.default_rng(0).standard_normal((4, 5))
    results = []
    for handler in (NumpyHandler(dtype, 0), emulated_cuda(dtype)):
        view = handler.transpose(handler.asarray(logits.T.copy()))
        for targets in (numpy.array([0, 4, 2, 2]), numpy.eye(5)[[1, 1, 0, 3]] * 0.5):
            with handler.tape() as tape:
                tape.watch(view)
                cost = handler.softmax_cross_entropy(view, handler.asarray(targets))
                (grad,) = tape.gradient(cost, [view])
            results.append((cost.value, grad.to_numpy()))
    for (a, ga), (b, gb) in zip(results[:2], results[2:]):
        assert a == pytest.approx(b, rel=1e-6)
        numpy.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-7)


def test_the_launch_checker_catches_a_wrong_argument():
    handler = emulated_cuda()
    kernel = handler.kernels._k["sgd"]
    param = handler.kernels.asarray(numpy.ones(4))
    with pytest.raises(AssertionError, match=r"sgd argument 2 \(long long\): int, expected int64"):
        kernel((1,), (256,), (param, param, 4, numpy.float32(0.1), handler.kernels._bad))
    with pytest.raises(AssertionError, match=r"sgd argument 1 \(T\*\): float64"):
        kernel((1,), (256,), (param, param.astype(numpy.float64), numpy.int64(4), numpy.float32(0.1), handler.kernels._bad))


# -- the stand-in refuses what real CuPy refuses ---------------------------------------------------------------
def test_the_stand_in_refuses_host_conversions_numpy_operands_and_names_cupy_lacks():
    import cupy

    x = cupy.asarray(numpy.ones((2, 3)))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        numpy.asarray(x)
    with pytest.raises(TypeError):
        float(x)  # more than one element
    assert float(x.sum()) == 6.0 and isinstance(x.sum(), cupy.ndarray)  # reductions give 0-d device arrays
    assert isinstance(numpy.exp(x), cupy.ndarray)  # NumPy's functions dispatch to CuPy's, as __array_ufunc__ does
    with pytest.raises(TypeError, match="Unsupported type"):
        cupy.add(x, numpy.ones(3))
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray"):
        x[...] = numpy.ones((2, 3))  # host data comes in through set() only
    with pytest.raises(NotImplementedError, match="maximum.reduce"):
        cupy.maximum.reduce(x, 1)
    with pytest.raises(AttributeError):
        cupy.busday_count  # noqa: B018 (NumPy has it, CuPy does not)
    with pytest.raises(ValueError, match="out= with a 1-D operand"):
        cupy.matmul(cupy.ones(2), x, out=cupy.empty(3))


def test_the_stand_in_sends_every_allocation_during_a_capture_to_the_allocator_in_use():
    import cupy

    x, out, asked = cupy.ones((4, 3)), cupy.empty((3, 3)), []
    stream = cupy.cuda.Stream(non_blocking=True)
    with cupy.cuda.using_allocator(asked.append), stream:
        stream.begin_capture()
        cupy.matmul(x.T, x, out=out)  # an F-contiguous operand, a C-contiguous out: cuBLAS takes them as they are
        assert asked == []
        y = x * 2  # an operator: a new buffer
        columns = x[:, ::2]  # neither C- nor F-contiguous: copied by matmul, as is its product for a strided out
        cupy.matmul(columns.T, columns, out=out[:2, ::2])
        with pytest.raises(RuntimeError, match="capturing"):
            y.get()
        graph = stream.end_capture()
    assert asked == [y.nbytes, columns.nbytes, columns.nbytes, 2 * 2 * out.itemsize]
    x.fill(3.0)
    graph.launch()  # the graph computes y from x as it is at launch
    numpy.testing.assert_array_equal(y.get(), numpy.full((4, 3), 6.0))


def test_the_current_device_is_per_thread_in_the_stand_in():
    import cupy

    cupy.cuda.Device(1).use()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(cupy.cuda.Device().id))
    worker.start()
    worker.join()
    assert seen == [0] and cupy.cuda.Device().id == 1


# -- what real CuPy refuses, done otherwise -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shapes", [((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4,)), ((4,), (2, 4, 5))],
                         ids=["vector-matrix", "matrix-vector", "vector-vector", "batch-vector", "vector-batch"])
def test_matmul_with_a_vector_matches_numpy_without_cupys_refused_call(dtype, shapes):
    rng = numpy.random.default_rng(0)
    x, y = (rng.standard_normal(shape) for shape in shapes)
    handler = emulated_cuda(dtype)
    product = handler.matmul(handler.asarray(x), handler.asarray(y)).to_numpy()
    expected = numpy.matmul(x.astype(dtype), y.astype(dtype))
    assert product.shape == expected.shape
    numpy.testing.assert_allclose(product, expected, rtol=16 * numpy.finfo(dtype).eps, atol=16 * numpy.finfo(dtype).eps)


def test_a_handler_on_device_1_trains_and_reads_on_other_threads():
    """The loop's own thread trains, a hook's thread reads: each must make device 1 current on itself, as
    ``Device.use()`` applies to the calling thread only."""
    import cupy

    def train(handler, costs):
        trainer, batches = _trainer(handler, dropout=0.0)
        costs.extend(float(trainer.run_iteration(next(batches))) for _ in range(3))
        batch = next(batches)
        costs.append(trainer.run_iteration(dict(batch, inputs=batch["inputs"] * numpy.nan)))  # read below

    here, there = [], []
    train(emulated_cuda("float64"), here)
    handler = emulated_cuda("float64", device=1)
    cupy.cuda.Device(0).use()  # this thread's device from now: not the handler's
    worker = threading.Thread(target=train, args=(handler, there))
    worker.start()
    worker.join()
    assert there[:3] == here[:3]
    errors = []  # reading the non-finite cost clears the flag on device 1
    reader = threading.Thread(target=lambda: errors.append(pytest.raises(NonFiniteError, float, there[-1]).value))
    reader.start()
    reader.join()
    assert len(errors) == 1 and "cost became non-finite" in str(errors[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_where_allocates_only_its_pooled_output(dtype):
    """What lets a step with where (maximum's VJP) be captured: no buffer but the pool's."""
    import cupy

    rng = numpy.random.default_rng(0)
    condition, x = rng.random((3, 4)) < 0.5, rng.standard_normal((3, 4))
    k = emulated_cuda(dtype).kernels
    device_condition, device_x = k.asarray(condition), k.asarray(x)
    asked = []
    with cupy.cuda.using_allocator(asked.append):
        out = k.where(device_condition, device_x, 0.5)
    assert asked == [out.nbytes]
    numpy.testing.assert_array_equal(out.get(), numpy.where(condition, x.astype(dtype), numpy.dtype(dtype).type(0.5)))

"""The cuda handler's Python side on an emulated CuPy. NOT a GPU check: it runs everywhere, without CuPy.

A stand-in ``cupy`` (NumPy arrays, events that do nothing, streams that run work
at once or, while capturing a CUDA graph, keep it for the graph's launches) runs
the real :mod:`sigma_cuda.handler`, :mod:`sigma_cuda.kernels`, :mod:`sigma_cuda.upload`
and :mod:`sigma_cuda.graphs`.
Each ``kernels.cu`` kernel is replaced by a NumPy transcription of its CUDA
code, called only after the launch has been checked against the kernel's C
signature, parsed from ``kernels.cu``: the number of arguments, each pointer's
dtype and C-contiguity, each scalar's exact NumPy type (a Python float where a
``long long`` is declared would be read as garbage on the device), and that the
grid covers every row or column the kernel indexes. So this catches what is
easy to get wrong between Python and CUDA, and checks every kernel's
arithmetic against the numpy handler through the conformance kit of
sigmann-testing; what it cannot catch is a bug in the CUDA code itself or in CuPy: that is what
``test_cuda_gpu.py`` is for.
"""

from __future__ import annotations

import contextlib
import re
import sys
import types
from pathlib import Path

import numpy
import pytest

from sigma_core import NumpyHandler
from sigma_core.architecture import Construct
from sigma_core.constructs import Input, SoftmaxCE
from sigma_core.errors import NonFiniteError
from sigma_core.network import Network
from sigma_core.optimisers import Adam
from sigma_core.trainer import Trainer
from sigmann_testing import HandlerConformance, check_layer

SOURCE = Path(__file__).resolve().parents[1] / "src" / "sigma_cuda" / "kernels.cu"
C_TYPES = {"float": numpy.float32, "double": numpy.float64, "long long": numpy.int64, "int": numpy.int32,
           "unsigned char": numpy.uint8, "short": numpy.int16, "unsigned long long": numpy.uint64}


# -- the stand-in CuPy -----------------------------------------------------------------------------------
class _Stream:
    """Work on it runs at once; between begin_capture() and end_capture() it is kept for the graph instead."""

    entered = []  # the streams of the enclosing ``with stream:`` blocks, innermost last

    def __init__(self, non_blocking=False):
        self.captured = None  # the work of a capture in progress

    def __enter__(self):
        _Stream.entered.append(self)
        return self

    def __exit__(self, *exc_info):
        _Stream.entered.pop()

    def wait_event(self, event):
        assert isinstance(event, _Event)

    def record(self, event=None):
        return event or _Event()

    def synchronize(self):
        assert self.captured is None, "synchronize() while capturing"

    def begin_capture(self, mode=None):
        assert self is not _NULL_STREAM and self.captured is None, "cannot capture on the default stream, or twice"
        self.captured = []

    def end_capture(self):
        graph, self.captured = _Graph(self.captured), None
        return graph

    def is_capturing(self):
        return self.captured is not None


_NULL_STREAM = _Stream()


def _current_stream():
    return _Stream.entered[-1] if _Stream.entered else _NULL_STREAM


def _capturing() -> bool:
    return _current_stream().captured is not None


def _enqueue(work, stream=None):
    """Device work on ``stream`` (the current one by default): run now, or kept by the capture in progress."""
    stream = stream or _current_stream()
    if stream.captured is None:
        work()
    else:
        stream.captured.append(work)


class _Graph:
    """A captured CUDA graph: its work, run in order by each launch."""

    def __init__(self, work):
        self.work, self.launches = work, 0

    def launch(self, stream=None):
        self.launches += 1
        for work in self.work:
            _enqueue(work, stream)


class FakeArray(numpy.ndarray):
    """A device array: a NumPy array that must be copied out with get() and in with set(); writes through fill(),
    [...] = and set() are device work (captured into a graph while capturing)."""

    def get(self, stream=None):
        assert not _capturing(), "get() while capturing a CUDA graph: a synchronous copy to the host"
        return numpy.array(self, copy=True)

    def set(self, array, stream=None):
        assert type(array) is numpy.ndarray and array.shape == self.shape and array.dtype == self.dtype, "set: mismatch"
        assert array.flags.c_contiguous, "set: the host array must be C-contiguous"
        _enqueue(lambda: numpy.ndarray.__setitem__(self, ..., array), stream)

    def fill(self, value):
        _enqueue(lambda: numpy.ndarray.fill(self, value))

    def __setitem__(self, key, value):
        _enqueue(lambda: numpy.ndarray.__setitem__(self, key, value))


def _device(value):
    """A NumPy result as a device array: one owning its memory, as CuPy's, unless it is a view."""
    if type(value) is not numpy.ndarray:
        return value
    if value.base is not None:
        return value.view(FakeArray)
    out = FakeArray(value.shape, value.dtype)
    numpy.copyto(out, value)
    return out


_ALLOCATORS = []  # cupy.cuda.using_allocator's, innermost last


@contextlib.contextmanager
def _using_allocator(allocator=None):
    _ALLOCATORS.append(allocator)
    try:
        yield
    finally:
        _ALLOCATORS.pop()


def _wrapped(name, function):
    def call(*args, **kwargs):
        if _capturing():  # a graph may hold work into given buffers, not make new ones (or read values now)
            if "out" not in kwargs:  # taken as an allocation: the allocator in use may refuse it
                if _ALLOCATORS and _ALLOCATORS[-1]:
                    _ALLOCATORS[-1](0)
                raise AssertionError(f"cupy.{name} without out= while capturing a CUDA graph: it would allocate")
            _enqueue(lambda: function(*args, **kwargs))
            return kwargs["out"]
        return _device(function(*args, **kwargs))

    return call


class _Event:
    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


class _Device:
    def __init__(self, index=0):
        self.id = index

    def use(self):
        pass

    def synchronize(self):
        pass


class OutOfMemoryError(MemoryError):
    pass


class PinnedMemoryPointer(bytearray):
    """Page-locked host memory, as the base of the NumPy arrays cupyx.empty_pinned returns."""


def _empty_pinned(shape, dtype):
    dtype = numpy.dtype(dtype)
    return numpy.ndarray(shape, dtype, buffer=PinnedMemoryPointer(max(1, int(numpy.prod(shape)) * dtype.itemsize)))


def _parse_signatures() -> dict:
    """{kernel: ([template parameter], [(kind, C type)])}, kind "pointer" or "value", from kernels.cu's templates."""
    signatures = {}
    for template, name, params in re.findall(r"template <([^>]*)>\s*__global__ void (\w+)\(([^)]*)\)",
                                             SOURCE.read_text()):
        parsed = []
        for param in " ".join(params.split()).split(","):
            ctype = param.strip().rsplit(" ", 1)[0].removeprefix("const ").strip()
            parsed.append(("pointer", ctype[:-1].strip()) if ctype.endswith("*") else ("value", ctype))
        signatures[name] = ([t.split()[-1] for t in template.split(",")], parsed)
    return signatures


SIGNATURES = _parse_signatures()


class _RawModule:
    def __init__(self, code, options=(), name_expressions=()):
        assert code == SOURCE.read_text()
        self.names = set(name_expressions)

    def get_function(self, expression):
        assert expression in self.names, f"{expression} was not among the name expressions"
        name, arguments = re.fullmatch(r"(\w+)<(.*)>", expression).groups()
        names, signature = SIGNATURES[name]
        template = dict(zip(names, (a.strip() for a in arguments.split(","))))
        assert len(template) == len(names), f"{expression}: {len(names)} template arguments expected"
        return _Kernel(name, template, signature)


class _Kernel:
    """A kernel launch, checked against its C signature, then run by its NumPy transcription (at once, or by the
    launches of the graph being captured). A scalar parameter instantiated as a pointer (``S = const T*``) takes a
    one-element device array, read when the kernel runs."""

    def __init__(self, name, template, signature):
        self.name, self.T, self.signature = name, C_TYPES[template["T"]], []
        for kind, ctype in signature:
            resolved = template.get(ctype, ctype)
            if kind == "value" and resolved.endswith("*"):
                kind, resolved = "scalar pointer", resolved[:-1]
            self.signature.append((kind, ctype, C_TYPES[resolved.removeprefix("const ").strip()]))

    def __call__(self, grid, block, args):
        assert len(grid) == 1 and len(block) == 1 and 0 < grid[0] < 2**31 and 0 < block[0] <= 1024, (grid, block)
        assert len(args) == len(self.signature), f"{self.name}: {len(args)} arguments for {len(self.signature)} parameters"
        for i, (arg, (kind, ctype, expected)) in enumerate(zip(args, self.signature)):
            where = f"{self.name} argument {i} ({ctype}{'*' if kind == 'pointer' else ''})"
            if kind == "pointer" and type(arg) is numpy.uint64:
                assert arg == 0, f"{where}: a pointer from an integer"
            elif kind != "value":
                assert isinstance(arg, FakeArray), f"{where}: {type(arg).__name__} is not a device array"
                assert arg.dtype == expected and arg.flags.c_contiguous, f"{where}: {arg.dtype}, contiguous {arg.flags.c_contiguous}"
                assert kind == "pointer" or arg.size == 1, f"{where}: a device scalar of {arg.size} elements"
            else:
                assert type(arg) is expected, f"{where}: {type(arg).__name__}, expected {expected.__name__}"

        def run():
            flat = [None if type(a) is numpy.uint64 and kind == "pointer" else a.reshape(-1)[0] if kind == "scalar pointer"
                    else a.reshape(-1) if kind == "pointer" else a for a, (kind, _, _) in zip(args, self.signature)]
            getattr(Emulated, self.name)(self.T, grid[0], block[0], *flat)

        _enqueue(run)


def _activate(v, code):
    if code == 1:
        return numpy.where(v < 0, 0, v)
    if code == 2:
        return numpy.tanh(v * v.dtype.type(0.5)) * v.dtype.type(0.5) + v.dtype.type(0.5)
    if code == 3:
        return numpy.tanh(v)
    if code == 4:
        return numpy.where(v > 0, v, 0) + numpy.log1p(numpy.exp(-numpy.abs(v)))
    return v


def _mix64(z):
    with numpy.errstate(over="ignore"):
        z = (z ^ (z >> numpy.uint64(30))) * numpy.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> numpy.uint64(27))) * numpy.uint64(0x94D049BB133111EB)
    return z ^ (z >> numpy.uint64(31))


class Emulated:
    """kernels.cu, line by line in NumPy (vectorised over the grid-stride loop); arrays arrive flattened."""

    @staticmethod
    def bias_activation(T, grid, block, y, bias, n, cols, use_bias, code):
        v = y[:n] + (bias[numpy.arange(n) % cols] if use_bias else T(0))
        y[:n] = _activate(v, code)

    @staticmethod
    def activation_backward(T, grid, block, g, y, out, n, code):
        g, y = g[:n], y[:n]
        out[:n] = {1: numpy.where(y > 0, g, T(0) * g), 2: (T(1) - y) * y * g, 3: (T(1) - y * y) * g,
                   4: (T(1) - numpy.exp(-y)) * g}.get(code, g)

    @staticmethod
    def column_sums(T, grid, block, x, out, rows, cols):
        assert block == 256 and grid * 32 >= cols, "column_sums: 8 lanes of 32 columns per block, every column"
        out[:cols] = x[:rows * cols].reshape(rows, cols).sum(axis=0, dtype=T)

    @staticmethod
    def softmax_ce_forward(T, grid, block, x, labels, targets, p, row_cost, rows, cols):
        assert block % 32 == 0 and grid * block // 32 >= rows, "softmax_ce_forward: a warp for every row"
        x = x[:rows * cols].reshape(rows, cols)
        s = x - x.max(axis=1, keepdims=True)
        e = numpy.exp(s)
        z = e.sum(axis=1, keepdims=True)
        p[:rows * cols] = (e * (T(1) / z)).reshape(-1)
        if labels is not None:
            t = labels[:rows].astype(numpy.int64)
            bad = (t < 0) | (t >= cols)
            picked = s[numpy.arange(rows), numpy.where(bad, 0, t)]
            row_cost[:rows] = numpy.where(bad, T(numpy.nan), numpy.log(z[:, 0]) - picked)
        else:
            t = targets[:rows * cols].reshape(rows, cols)
            row_cost[:rows] = t.sum(axis=1) * numpy.log(z[:, 0]) - (t * s).sum(axis=1)

    @staticmethod
    def mean_of_rows(T, grid, block, row_cost, cost, rows):
        assert grid == 1 and block == 256, "mean_of_rows: one block of 256 threads"
        cost[0] = T(row_cost[:rows].astype(numpy.float64).sum() / rows)

    @staticmethod
    def softmax_ce_backward(T, grid, block, p, labels, targets, g, out, rows, cols, inverse_rows):
        assert block % 32 == 0 and grid * block // 32 >= rows, "softmax_ce_backward: a warp for every row"
        p = p[:rows * cols].reshape(rows, cols)
        scale = g[0] * inverse_rows
        if labels is not None:
            onehot = numpy.arange(cols) == labels[:rows, None].astype(numpy.int64)
            out[:rows * cols] = ((p - onehot.astype(T)) * scale).reshape(-1)
        else:
            t = targets[:rows * cols].reshape(rows, cols)
            out[:rows * cols] = ((p * t.sum(axis=1, keepdims=True) - t) * scale).reshape(-1)

    @staticmethod
    def dropout(T, grid, block, x, y, mask, n, stream, threshold, scale):
        with numpy.errstate(over="ignore"):
            z = _mix64(stream + (numpy.arange(n, dtype=numpy.uint64) + numpy.uint64(1)) * numpy.uint64(0x9E3779B97F4A7C15))
        m = numpy.where((z >> numpy.uint64(11)) < threshold, scale, T(0) * scale)
        mask[:n] = m
        y[:n] = x[:n] * m

    @staticmethod
    def flag_non_finite(T, grid, block, x, bad):
        if not numpy.isfinite(x[0]):
            bad[0] = 1

    @staticmethod
    def l2_gradient(T, grid, block, grad, param, out, n, weight_decay):
        out[:n] = grad[:n] + weight_decay * param[:n]

    @staticmethod
    def sgd(T, grid, block, param, grad, n, lr, bad):
        if not bad[0]:
            param[:n] -= lr * grad[:n]

    @staticmethod
    def momentum(T, grid, block, param, grad, velocity, n, lr, mu, nesterov, bad):
        if not bad[0]:
            v = mu * velocity[:n] + grad[:n]
            velocity[:n] = v
            param[:n] -= lr * (grad[:n] + mu * v) if nesterov != 0 else lr * v

    @staticmethod
    def adagrad(T, grid, block, param, grad, sq, n, lr, eps, bad):
        if not bad[0]:
            sq[:n] += grad[:n] * grad[:n]
            param[:n] -= lr * (grad[:n] / (numpy.sqrt(sq[:n]) + eps))

    @staticmethod
    def rmsprop(T, grid, block, param, grad, sq, n, lr, rho, rest, eps, bad):
        if not bad[0]:
            sq[:n] = rho * sq[:n] + rest * (grad[:n] * grad[:n])
            param[:n] -= lr * (grad[:n] / (numpy.sqrt(sq[:n]) + eps))

    @staticmethod
    def adadelta(T, grid, block, param, grad, acc_grad, acc_update, n, lr, rho, rest, eps, bad):
        if not bad[0]:
            acc_grad[:n] = rho * acc_grad[:n] + rest * (grad[:n] * grad[:n])
            delta = numpy.sqrt(acc_update[:n] + eps) / numpy.sqrt(acc_grad[:n] + eps) * grad[:n]
            acc_update[:n] = rho * acc_update[:n] + rest * (delta * delta)
            param[:n] -= lr * delta

    @staticmethod
    def adam(T, grid, block, param, grad, m, v, n, step_size, beta1, rest1, beta2, rest2, root_correction, eps, bad):
        if not bad[0]:
            m[:n] = beta1 * m[:n] + rest1 * grad[:n]
            v[:n] = beta2 * v[:n] + rest2 * (grad[:n] * grad[:n])
            param[:n] -= step_size * (m[:n] / (numpy.sqrt(v[:n]) * root_correction + eps))


def fake_modules() -> dict:
    cupy = types.ModuleType("cupy")
    cupy.__getattr__ = lambda name: _wrapped(name, getattr(numpy, name))  # every other function: NumPy's, on device arrays
    cupy.ndarray = FakeArray
    cupy.RawModule = _RawModule
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(total_bytes=lambda: 0, malloc=None)
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, memGetInfo=lambda: (2**30, 2**34),
                                    CUDARuntimeError=RuntimeError)
    cupy.cuda = types.SimpleNamespace(Device=_Device, Stream=_Stream, Event=lambda disable_timing=False: _Event(),
                                      get_current_stream=_current_stream, using_allocator=_using_allocator,
                                      runtime=runtime, PinnedMemoryPointer=PinnedMemoryPointer,
                                      memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
    cupyx = types.ModuleType("cupyx")
    cupyx.empty_pinned = _empty_pinned
    cupyx.scatter_add = lambda a, index, values: numpy.add.at(a, index, values)
    return {"cupy": cupy, "cupyx": cupyx}


_OURS = ("sigma_cuda.upload", "sigma_cuda.kernels", "sigma_cuda.graphs", "sigma_cuda.handler")


@pytest.fixture(autouse=True)
def emulated_cupy(monkeypatch):
    """The stand-in in sys.modules for one test, and sigma_cuda's device modules imported afresh on it; afterwards
    whatever was there before (the real ones, where a GPU test ran first in this process) comes back."""
    import sigma_cuda

    for name, module in fake_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    saved = {name: (sys.modules.pop(name, None), getattr(sigma_cuda, name.rsplit(".", 1)[1], None)) for name in _OURS}
    for name in _OURS:
        if hasattr(sigma_cuda, name.rsplit(".", 1)[1]):
            delattr(sigma_cuda, name.rsplit(".", 1)[1])
    yield
    for name, (module, attribute) in saved.items():
        sys.modules.pop(name, None)
        if module is not None:
            sys.modules[name] = module
        short = name.rsplit(".", 1)[1]
        if attribute is not None:
            setattr(sigma_cuda, short, attribute)
        elif hasattr(sigma_cuda, short):
            delattr(sigma_cuda, short)


def emulated_cuda(dtype="float32", seed=0):
    from sigma_cuda.handler import CudaHandler

    return CudaHandler(dtype, seed)


class TestEmulatedCudaConformance(HandlerConformance):
    handler_factory = staticmethod(emulated_cuda)


def _trainer(handler, dropout=0.2, *, replay=False, optimiser=None, size=50, last_batch="drop", layers=None,
             shape=(64,)):
    """A trainer on the digits (1,797 records of ``shape``, in batches of ``size``) and an iterator over its first
    epoch. Records are never reshaped for an input layer, so an 8×8 input gets the digits reshaped here."""
    from sigma_core.data import MinibatchIterator

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

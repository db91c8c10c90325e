"""The CUDA kernels: :class:`~sigma_core.compute.kernels.ArrayKernels` over CuPy, hot paths hand-written.

Everything is inherited with ``xp = cupy`` (CuPy's ufuncs and reductions on
pooled buffers); what a training step spends its time on is replaced by the
kernels of ``kernels.cu``, one launch each:

* ``dense``: cuBLAS GEMM into the pooled output, then bias + activation in one pass;
* ``activation_backward``, bias-gradient column sums;
* ``softmax_cross_entropy`` forward (probabilities and per-row cost, one warp per row,
  then one block for the mean) and backward, for labels and for target rows;
* ``dropout`` with a counter-based generator (the same bits as sigma_cpu's);
* the optimiser update rules with a kernel here (by name: the core's and sigmann-optimisers') and
  ``l2_gradient`` (:class:`CudaUpdates`): one pass per parameter.

The kernels whose scalars change between steps (the updates' hyperparameters,
dropout's stream key) have a second instantiation reading them from device
memory, for recorded steps captured as CUDA graphs (:mod:`sigma_cuda.graphs`,
through :meth:`CudaKernels.capture`).

Nothing on a training step waits for the device. The two places where the
generic code would read a value back are replaced: the class-label range is
computed on the host when the labels are uploaded (:meth:`CudaKernels.label_range`),
and the finiteness of a step's cost is checked on the device
(:meth:`CudaKernels.all_finite`): a non-finite cost sets a flag that turns the
update kernels into no-ops, and the next read to the host raises
:class:`~sigma_core.errors.NonFiniteError`. Batches arrive through pinned host
memory on a copy stream (:mod:`sigma_cuda.upload`).

An array the kernels were not written for (not C-contiguous, another dtype, an
unusual shape) goes to the inherited CuPy version.
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict
from pathlib import Path

import cupy
import cupyx
import numpy

from sigma_core import ArrayKernels, CounterStreams, NonFiniteError, ShapeError, SigmaError, Updates

from .devices import out_of_memory_message
from .upload import Uploader

ACTIVATION_CODES = {"none": 0, "relu": 1, "sigmoid": 2, "tanh": 3, "softplus": 4}

_NULL = numpy.uint64(0)  # a null pointer argument
_THREADS = 256
_MAX_BLOCKS = 65535  # grid-stride loops cover the rest
_WARPS = _THREADS // 32

#: C types of the label dtypes the cross-entropy kernels are instantiated for; others are cast to int64.
_LABEL_TYPES = {"int64": "long long", "int32": "int", "uint8": "unsigned char", "int16": "short"}

_ELEMENTWISE = ("bias_activation", "activation_backward", "column_sums", "mean_of_rows", "flag_non_finite")
#: Kernels with scalars S that a CUDA graph reads from device memory (kernels.cu): the scalars' C type, T if None.
_SCALARS = {"dropout": "unsigned long long", "l2_gradient": None, "sgd": None, "momentum": None, "adagrad": None,
            "rmsprop": None, "adadelta": None, "adam": None}
_PER_LABEL_TYPE = ("softmax_ce_forward", "softmax_ce_backward")

@functools.cache
def compile_module(ctype: str, device: int) -> tuple[dict, dict, dict]:
    """``kernels.cu`` compiled for ``ctype`` (float or double) and loaded on ``device``, once per process:
    ``({name: kernel}, {name: kernel reading its scalars S from the device}, {(name, label dtype): kernel})``."""
    source = (Path(__file__).parent / "kernels.cu").read_text()
    plain = {name: f"{name}<{ctype}>" for name in _ELEMENTWISE}
    plain.update((name, f"{name}<{ctype}, {s or ctype}>") for name, s in _SCALARS.items())
    read = {name: f"{name}<{ctype}, const {s or ctype}*>" for name, s in _SCALARS.items()}
    labelled = {(name, dtype): f"{name}<{ctype}, {c} >"
                for name in _PER_LABEL_TYPE for dtype, c in _LABEL_TYPES.items()}
    module = cupy.RawModule(code=source, options=("--std=c++14",),
                            name_expressions=[*plain.values(), *read.values(), *labelled.values()])
    return tuple({k: module.get_function(v) for k, v in d.items()} for d in (plain, read, labelled))


def use_device(index: int):
    """Make device ``index`` current on the calling thread, if it is not: CUDA's current device (and so CuPy's,
    ``Device.use()``) is per thread, and the training loop, threaded hooks and the prefetching worker each run
    on their own; on another device a kernel would not find its module and new buffers would land elsewhere."""
    if cupy.cuda.runtime.getDevice() != index:
        cupy.cuda.runtime.setDevice(index)


def _blocks(n: int) -> tuple:
    return (min((n + _THREADS - 1) // _THREADS, _MAX_BLOCKS),)


def _warp_blocks(rows: int) -> tuple:
    return (min((rows + _WARPS - 1) // _WARPS, 2**31 - 1),)


class CudaUpdates(Updates):
    """Every update rule with a kernel in ``kernels.cu`` (by its name) as one launch per parameter; skipped on the
    device after a non-finite cost. Other rules run their reference over CuPy."""

    handler_name = "cuda"

    def __init__(self, kernels):
        super().__init__(kernels)
        self.dtype, self._scalar, self._k, self._bad = kernels.dtype, kernels._scalar, kernels._k, kernels._bad
        self._read = kernels._read

    def _run(self, name, arrays, *scalars, flag=True) -> bool:
        """Launch ``name`` on ``arrays`` (all C-contiguous in the handler dtype, one size) and ``scalars`` (cast to
        the dtype, or all device scalars: :mod:`sigma_cuda.graphs`); False, launching nothing, when the arrays don't fit."""
        dtype, size = self.dtype, arrays[0].size
        for a in arrays:
            if a.dtype != dtype or a.size != size or not a.flags.c_contiguous:
                return False
        if size:
            on_device = isinstance(scalars[0], cupy.ndarray)
            (self._read if on_device else self._k)[name](_blocks(size), (_THREADS,), (
                *arrays, numpy.int64(size), *(scalars if on_device else map(self._scalar, scalars)),
                *((self._bad,) if flag else ())))
        return True

    def compiled(self, name, rule):
        """The rule's kernel in ``kernels.cu`` on arrays that fit (:meth:`_run`), or None where it has none (the
        rules' kernels are those with a device-scalar twin, for CUDA graphs)."""
        return functools.partial(self._run, name) if name in self._read else None

    def l2_gradient(self, grad, param, weight_decay):
        out = self.empty(param.shape)
        if not self._run("l2_gradient", (grad, param, out), weight_decay, flag=False):
            return super().l2_gradient(grad, param, weight_decay)
        return out


class CudaKernels(ArrayKernels):
    """:class:`ArrayKernels` on the current CUDA device (see the module docstring)."""

    xp = cupy
    updates_class = CudaUpdates

    def __init__(self, dtype, seed=None):
        self._scalar = numpy.dtype(dtype).type
        ctype = "float" if numpy.dtype(dtype) == numpy.float32 else "double"
        self.device_id = cupy.cuda.Device().id  # the handler made its device current on this thread
        self._k, self._read, self._labelled = (dict(d) for d in compile_module(ctype, self.device_id))  # own copies
        self._bad = cupy.zeros(1, numpy.int32)  # the deferred non-finite flag (see all_finite)
        self._checks_pending = False
        super().__init__(dtype, seed)
        self._host = ArrayKernels(dtype)  # draws random numbers on the host, from the same generator
        self._host.rng = self.rng
        self.streams = CounterStreams(seed)  # dropout's, the same streams as sigma_cpu's
        self._label_ranges = OrderedDict()  # id(device labels) -> (labels, (low, high)), filled on upload
        self.uploader = Uploader()

    # -- memory ----------------------------------------------------------------------------------
    def empty(self, shape, dtype=None):
        dtype = self.dtype if dtype is None else dtype
        try:
            return self.pool.empty(tuple(shape), dtype)
        except cupy.cuda.memory.OutOfMemoryError:
            free, total = cupy.cuda.runtime.memGetInfo()
            raise SigmaError(out_of_memory_message(sys._getframe(1).f_code.co_name, shape, dtype,
                                                   cupy.cuda.Device().id, free, total,
                                                   cupy.get_default_memory_pool().total_bytes())) from None

    # -- copies in and out ------------------------------------------------------------------------
    def asarray(self, host_array):
        if isinstance(host_array, cupy.ndarray):
            dtype = self.dtype if host_array.dtype.kind in "fc" else host_array.dtype
            out = self.empty(host_array.shape, dtype)
            out[...] = host_array
            return out
        host = numpy.asarray(host_array)
        dtype = self.dtype if host.dtype.kind in "fc" or host.dtype == object else host.dtype
        out = self.empty(host.shape, dtype)
        out.set(numpy.asarray(host, dtype, order="C"))  # ascontiguousarray would make a 0-d array 1-d
        self._remember_labels(out, host)
        return out

    def adopt(self, host_array):
        """A batch: inside a session, through pinned memory on the copy stream (:mod:`sigma_cuda.upload`)."""
        if not self.pool.active or type(host_array) is not numpy.ndarray or host_array.dtype.kind not in "fiub":
            return self.asarray(host_array)
        host = host_array if host_array.dtype.kind in "iub" else host_array.astype(self.dtype, copy=False)
        out = self.uploader.upload(host)
        self._remember_labels(out, host)
        return out

    def _remember_labels(self, device, host):
        """Integer arrays (class labels) get their range from the host copy: checking it later costs no sync."""
        if host.dtype.kind in "iu" and host.size:
            ranges = self._label_ranges
            ranges[id(device)] = (device, (int(host.min()), int(host.max())))
            ranges.move_to_end(id(device))
            if len(ranges) > 16:
                ranges.popitem(last=False)

    def label_range(self, labels):
        known = self._label_ranges.get(id(labels))
        if known is not None and known[0] is labels:
            return known[1]
        return super().label_range(labels)  # labels made on the device: one read back

    def to_host(self, x):
        """A NumPy copy (waits for the device); raises a deferred non-finite cost first."""
        host = x.get() if isinstance(x, cupy.ndarray) else numpy.array(x, copy=True)
        self.raise_deferred()
        return host

    def raise_deferred(self):
        if self._checks_pending:
            self._checks_pending = False
            if int(self._bad.get()[0]):
                self._bad.fill(0)
                raise NonFiniteError("a training step's cost became non-finite (nan or inf) on the CUDA device; "
                                     "no parameter has changed since that step")

    def all_finite(self, x) -> bool:
        """A cost (0-d) is checked on the device: True now, and the flag stops the updates (module docstring)."""
        if x.ndim == 0 and x.dtype == self.dtype:
            self._k["flag_non_finite"]((1,), (1,), (x, self._bad))
            self._checks_pending = True
            return True
        return bool(cupy.isfinite(x).all())

    # -- fused forward and backward -----------------------------------------------------------------
    def _fits(self, *arrays) -> bool:
        for a in arrays:  # a loop, not all(...): checked on every hot call
            if a.dtype != self.dtype or not a.flags.c_contiguous:
                return False
        return True

    def where(self, condition, x, y):
        """The core's, without the result buffer ``cupy.where`` makes: ``y``, then ``x`` where ``condition``,
        copied into the pooled output, so a step with it (the VJPs of maximum and where) can be captured as a CUDA
        graph (:mod:`sigma_cuda.graphs` refuses allocations while capturing)."""
        try:
            shape = numpy.broadcast_shapes(*(getattr(v, "shape", ()) for v in (condition, x, y)))
        except ValueError:
            return super().where(condition, x, y)  # the core's ShapeError
        out = self.empty(shape)
        cupy.copyto(out, y)
        cupy.copyto(out, x, where=condition)
        return out

    def matmul(self, x, y):
        """The core's product, a 1-D operand taken as a one-row (or one-column) matrix, the result viewed without
        that axis: CuPy 13's ``cupy.matmul`` refuses ``out=`` when an operand is 1-D, and the core passes ``out=``."""
        if not (x.ndim == 1 or y.ndim == 1) or x.ndim == 0 or y.ndim == 0:
            return super().matmul(x, y)  # no vector (or a 0-d operand, which the core refuses)
        if x.shape[-1] != y.shape[-2 if y.ndim > 1 else 0]:
            return super().matmul(x, y)  # the core's shape error, naming the shapes as given
        out = super().matmul(x.reshape(1, -1) if x.ndim == 1 else x, y.reshape(-1, 1) if y.ndim == 1 else y)
        rows, cols = out.shape[-2:]
        return out.reshape(out.shape[:-2] + ((rows,) if x.ndim != 1 else ()) + ((cols,) if y.ndim != 1 else ()))

    def dense(self, x, weights, bias, activation):
        out = self.matmul(x, weights)
        if bias is not None and bias.shape != out.shape[-1:]:
            raise ShapeError(f"dense: bias shape {bias.shape} does not match output shape {out.shape}")
        if out.ndim == 0 or not self._fits(out, *(() if bias is None else (bias,))):
            return self._bias_fallback(out, bias, activation)
        if (bias is not None or activation != "none") and out.size:
            self._k["bias_activation"](_blocks(out.size), (_THREADS,), (
                out, out if bias is None else bias, numpy.int64(out.size), numpy.int64(out.shape[-1]),
                numpy.int32(bias is not None), numpy.int32(ACTIVATION_CODES[activation])))
        return out

    def _bias_fallback(self, out, bias, activation):
        if bias is not None:
            cupy.add(out, bias, out=out)
        return self.activate(activation, out, out)

    def activation_backward(self, name, g, y):
        if name == "none":
            return g
        if g.shape != y.shape or not self._fits(g, y):
            return super().activation_backward(name, g, y)
        out = self.empty(y.shape)
        if out.size:
            self._k["activation_backward"](_blocks(out.size), (_THREADS,), (
                g, y, out, numpy.int64(out.size), numpy.int32(ACTIVATION_CODES[name])))
        return out

    def sum(self, x, axis=None, keepdims=False):
        """Column sums of a matrix (bias gradients) in one kernel; anything else by CuPy."""
        if axis == 0 and not keepdims and x.ndim == 2 and x.shape[0] and x.shape[1] and self._fits(x):
            out = self.empty(x.shape[1:])
            rows, cols = x.shape
            self._k["column_sums"](((cols + 31) // 32,), (_THREADS,), (x, out, numpy.int64(rows), numpy.int64(cols)))
            return out
        return self._reduce(cupy.sum, x, axis, keepdims)

    def _softmax_ce_arguments(self, logits, targets):
        """``(logits, labels, target rows, label dtype)`` as the kernels take them, or None for the generic path."""
        if logits.ndim != 2 or not logits.shape[0] or not logits.shape[1] or not self._fits(logits):
            return None
        if targets.dtype.kind in "iu":
            if targets.shape != logits.shape[:1] or not targets.flags.c_contiguous:
                return None
            if targets.dtype.name not in _LABEL_TYPES:
                targets = targets.astype(numpy.int64)
            return logits, targets, _NULL, targets.dtype.name
        if targets.shape != logits.shape or not self._fits(targets):
            return None
        return logits, _NULL, targets, "int64"

    def softmax_cross_entropy(self, logits, targets):
        arguments = self._softmax_ce_arguments(logits, targets)
        if arguments is None:
            return self._generic_softmax_cross_entropy(logits, targets)
        logits, labels, rows_of_targets, label_dtype = arguments
        rows, cols = logits.shape
        probabilities, row_cost, cost = self.empty(logits.shape), self.empty((rows,)), self.empty(())
        self._labelled["softmax_ce_forward", label_dtype](_warp_blocks(rows), (_THREADS,), (
            logits, labels, rows_of_targets, probabilities, row_cost, numpy.int64(rows), numpy.int64(cols)))
        self._k["mean_of_rows"]((1,), (_THREADS,), (row_cost, cost, numpy.int64(rows)))
        return cost, probabilities

    def _generic_softmax_cross_entropy(self, logits, targets):
        """The reference's formula in CuPy calls, kept on the device (the inherited one reads the cost back)."""
        log_p = self.log_softmax(logits, axis=-1)
        rows = logits.shape[0]
        if targets.dtype.kind in "iu":
            picked = log_p[cupy.arange(rows), targets]
            cost = cupy.sum(picked) * (-1.0 / rows)
        else:
            cost = cupy.sum(targets * log_p) * (-1.0 / rows)
        return cost.astype(self.dtype), cupy.exp(log_p)

    def softmax_cross_entropy_backward(self, g, probabilities, targets):
        arguments = self._softmax_ce_arguments(probabilities, targets)
        if arguments is None or not isinstance(g, cupy.ndarray) or g.dtype != self.dtype or g.size != 1:
            return super().softmax_cross_entropy_backward(g, probabilities, targets)
        probabilities, labels, rows_of_targets, label_dtype = arguments
        rows, cols = probabilities.shape
        out = self.empty(probabilities.shape)
        self._labelled["softmax_ce_backward", label_dtype](_warp_blocks(rows), (_THREADS,), (
            probabilities, labels, rows_of_targets, g, out, numpy.int64(rows), numpy.int64(cols),
            self._scalar(1.0 / rows)))
        return out

    # -- random numbers: initialisers on the host (the numpy handler's values), dropout on the device -----
    def uniform(self, shape, low=0.0, high=1.0):
        return self.asarray(self._host.uniform(shape, low, high))

    def normal(self, shape, mean=0.0, std=1.0):
        return self.asarray(self._host.normal(shape, mean, std))

    def bernoulli(self, shape, p):
        return self.asarray(self._host.bernoulli(shape, p))

    def dropout(self, x, p):
        """Mask and output in one kernel; call number c draws from the stream keyed mix(key + c·golden)."""
        if not self._fits(x):
            x = cupy.ascontiguousarray(x, dtype=self.dtype)
        y, mask = self.empty(x.shape), self.empty(x.shape)
        self._dropout(x, p, y, mask, numpy.uint64(self.streams.next()))
        return y, mask

    def _dropout(self, x, p, y, mask, stream):
        """The dropout kernel; ``stream``: the call's key, or a device scalar holding it (:mod:`sigma_cuda.graphs`)."""
        keep = 1.0 - p
        if x.size:
            (self._read if isinstance(stream, cupy.ndarray) else self._k)["dropout"](_blocks(x.size), (_THREADS,), (
                x, y, mask, numpy.int64(x.size), stream, numpy.uint64(min(int(keep * 2.0**53), 2**53)),
                self._scalar(1.0 / keep)))

    def capture(self, recording, calls):
        """A recorded step as a CUDA graph: sigmann-replay's step compiler asks (its ``Recording`` and the calls
        a replay makes, one per record), :mod:`sigma_cuda.graphs` answers; it raises ``recording.declined`` to decline."""
        from .graphs import GraphStep

        return GraphStep(self, recording, calls)

    def rng_state(self) -> dict:
        return self.streams.save(super().rng_state())

    def set_rng_state(self, state: dict):
        super().set_rng_state(state)
        self.streams.load(state)

    # -- what CuPy spells differently -------------------------------------------------------------------
    def getitem(self, x, index):
        return super().getitem(x, cupy.asarray(index) if isinstance(index, list) else index)

    def scatter_add(self, shape, index, g):
        out = self.full(shape, 0)
        if isinstance(index, list):
            index = cupy.asarray(index)
        if isinstance(index, cupy.ndarray) and index.dtype == bool:
            out[index] = g  # a mask selects each element once: nothing to add up
        else:
            cupyx.scatter_add(out, index, g)
        return out

"""An emulated CuPy for tests (sigma_cuda's, and an op plugin's): strict where real CuPy is strict. NOT a GPU check.

Test code imports it (it imports pytest for the :func:`emulated_cupy` fixture): ``from sigma_cuda.emulation import
emulated_cupy`` in a test module runs every test there on the stand-in.

It runs the real :mod:`sigma_cuda.handler`, :mod:`sigma_cuda.kernels`, :mod:`sigma_cuda.upload` and
:mod:`sigma_cuda.graphs` without CuPy or a device, and refuses what real CuPy refuses, so that a test
passing here cannot pass only because the stand-in is lenient:

* device arrays (:class:`FakeArray`) are not NumPy arrays: they hold one. ``numpy.asarray(x)`` raises as
  CuPy's ``__array__`` does; ``float(x)`` of a multi-element array raises; ``x[...] = host_array`` and
  ``x.fill(host_array)`` raise (only ``set()`` copies host data in); NumPy functions and ufuncs on
  them dispatch to the stand-in's functions of the same name as CuPy's ``__array_function__`` and
  ``__array_ufunc__`` do, and refuse NumPy arrays among the operands; reductions return 0-d arrays;
* ``cupy`` has only the names in :data:`FUNCTIONS` and :data:`UFUNCS`, each checked against CuPy's
  ``cupy/__init__.py`` (github.com/cupy/cupy at 6b6d956, August 2026); ``ufunc.reduce`` works only for
  ``add`` and ``multiply`` and ``ufunc.at`` only for ``add`` and ``subtract``, as in CuPy's ``_kernel.pyx``;
* ``matmul`` with ``out=`` and a 1-D operand raises, as CuPy 13's ``_GUFunc`` does (CuPy's own
  ``TestMatmulOut`` skips the case); ``matmul`` into a non-contiguous ``out`` or from an operand that is
  neither C- nor F-contiguous allocates a temporary, as ``_routines_linalg.pyx`` does;
* every new device buffer goes through the allocator in use (``cupy.cuda.using_allocator``, per thread),
  so a capture that refuses allocations (:mod:`sigma_cuda.graphs`) sees every one, hidden temporaries
  included; reading to the host while capturing raises;
* the current device is per thread (``Device.use()`` applies to the calling thread only); a kernel runs
  only on the device its module was loaded on, and an array only on the current device (no peer access);
* streams run work at once, or, between ``begin_capture()`` and ``end_capture()``, keep it for the
  graph's launches.

Each ``kernels.cu`` kernel is replaced by a NumPy transcription of its CUDA code (:class:`Emulated`),
called only after the launch has been checked against the kernel's C signature, parsed from
``kernels.cu``: the number of arguments, each pointer's dtype and C-contiguity, each scalar's exact
NumPy type (a Python float where a ``long long`` is declared would be read as garbage on the device),
and that the grid covers every row or column the kernel indexes. What it cannot catch is a bug in the
CUDA code itself or in CuPy: that is what ``test_cuda_gpu.py`` is for.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import types
from pathlib import Path

import numpy
import pytest

SOURCE = Path(__file__).resolve().with_name("kernels.cu")
C_TYPES = {"float": numpy.float32, "double": numpy.float64, "long long": numpy.int64, "int": numpy.int32,
           "unsigned char": numpy.uint8, "short": numpy.int16, "unsigned long long": numpy.uint64}

#: CuPy's ufuncs that Sigma calls (each a ``cupy`` name, checked against CuPy's source), by NumPy's of the same name.
UFUNCS = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "negative", "exp", "log",
          "log1p", "sqrt", "abs", "absolute", "sign", "tanh", "logaddexp", "greater", "greater_equal", "less",
          "less_equal", "equal", "not_equal", "isfinite", "isnan", "logical_and", "logical_or", "logical_not",
          "rint", "invert", "bitwise_and", "bitwise_or")
#: CuPy's other functions that Sigma calls (checked as UFUNCS), by NumPy's of the same name.
FUNCTIONS = ("sum", "mean", "max", "min", "amax", "amin", "argmax", "all", "any", "prod", "cumsum", "clip",
             "where", "copyto", "matmul", "dot", "einsum", "tensordot", "concatenate", "stack", "reshape",
             "transpose", "ravel", "broadcast_to", "take", "arange", "empty", "zeros", "ones", "full",
             "empty_like", "zeros_like", "ones_like", "full_like", "asarray", "array", "ascontiguousarray", "triu",
             "tril")
#: Functions that take host data (NumPy arrays) and copy it to the device; every other one refuses it.
_FROM_HOST = ("asarray", "array", "ascontiguousarray")
#: The ufuncs whose ``reduce`` and ``at`` CuPy implements (``_kernel.pyx``: NotImplementedError for the rest).
_REDUCE, _AT = ("add", "multiply"), ("add", "subtract")
DEVICES = 2  #: devices the stand-in has: ``cuda:1`` exists


# -- threads: each has its current device, stream and allocator, as in CuPy ------------------------------
class _ThreadState(threading.local):
    def __init__(self):
        self.device = 0
        self.streams = []  # the streams of the enclosing ``with stream:`` blocks, innermost last
        self.allocators = []  # using_allocator's, innermost last


_THREAD = _ThreadState()


class _Device:
    """``cupy.cuda.Device``: ``Device()`` is the calling thread's current device; ``use()`` changes that thread's."""

    def __init__(self, index=None):
        self.id = _THREAD.device if index is None else index
        if not 0 <= self.id < DEVICES:
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {self.id}")
        self._previous = []

    def use(self):
        _THREAD.device = self.id

    def __enter__(self):
        self._previous.append(_THREAD.device)
        self.use()
        return self

    def __exit__(self, *exc_info):
        _THREAD.device = self._previous.pop()

    def synchronize(self):
        assert not _capturing(), "Device.synchronize() while capturing a CUDA graph"


def _set_device(index):
    _Device(index).use()


def _check_device(arrays):
    """CuPy's check before a kernel runs: every array on the current device (no peer access here)."""
    for a in arrays:
        if a._device != _THREAD.device:
            raise ValueError(f"The device where the array resides ({a._device}) is different from the current "
                             f"device ({_THREAD.device}). Peer access is unavailable between these devices.")


# -- streams and CUDA graphs ------------------------------------------------------------------------------
class _Stream:
    """Work on it runs at once; between begin_capture() and end_capture() it is kept for the graph instead."""

    def __init__(self, non_blocking=False):
        self.captured = None  # the work of a capture in progress

    def __enter__(self):
        _THREAD.streams.append(self)
        return self

    def __exit__(self, *exc_info):
        _THREAD.streams.pop()

    def wait_event(self, event):
        assert isinstance(event, _Event)

    def record(self, event=None):
        return event or _Event()

    def synchronize(self):
        assert self.captured is None, "synchronize() while capturing"

    def begin_capture(self, mode=None):
        if self is _NULL_STREAM:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        assert self.captured is None, "capturing twice"
        self.captured = []

    def end_capture(self):
        graph, self.captured = _Graph(self.captured), None
        return graph

    def is_capturing(self):
        return self.captured is not None


_NULL_STREAM = _Stream()


def _current_stream():
    return _THREAD.streams[-1] if _THREAD.streams else _NULL_STREAM


def _capturing() -> bool:
    return _current_stream().captured is not None


def _refuse_sync(what):
    if _capturing():  # cupy/cuda/memory.pyx's message
        raise RuntimeError(f"{what}: the current stream is capturing, so synchronous API calls are disallowed")


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


class _Event:
    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


@contextlib.contextmanager
def _using_allocator(allocator=None):
    _THREAD.allocators.append(allocator)
    try:
        yield
    finally:
        _THREAD.allocators.pop()


def _allocate(nbytes):
    """A new device buffer: through the calling thread's allocator in use, as CuPy's every allocation goes."""
    allocator = _THREAD.allocators[-1] if _THREAD.allocators else None
    if allocator is not None:
        allocator(nbytes)


# -- device arrays ----------------------------------------------------------------------------------------
class FakeArray:
    """A device array: its memory is a NumPy array (``_a``), but it is not one (see the module docstring).

    ``base`` is the array it views (None if it owns its memory), as CuPy's; writes through ``fill``,
    ``[...] =``, the in-place operators and ``set`` are device work (kept by a capture in progress).
    """

    __slots__ = ("_a", "_device", "base")
    __array_priority__ = 100

    def __init__(self, data: numpy.ndarray, base=None, device=None):
        self._a, self.base = data, base
        self._device = _THREAD.device if device is None else device

    # what CuPy's ndarray has
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: types.SimpleNamespace(c_contiguous=self._a.flags.c_contiguous,
                                                         f_contiguous=self._a.flags.f_contiguous,
                                                         owndata=self.base is None))
    device = property(lambda self: _Device(self._device))
    T = property(lambda self: self.transpose())

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's ufuncs on device arrays run CuPy's of the same name; a NumPy array among them is refused."""
        function = getattr(_cupy(), ufunc.__name__, None)
        if function is None:
            return NotImplemented
        if "out" in kwargs:
            (kwargs["out"],) = kwargs["out"]
        return function(*inputs, **kwargs) if method == "__call__" else getattr(function, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        function = getattr(_cupy(), func.__name__, None) if func.__module__ == "numpy" else None
        return NotImplemented if function is None else function(*args, **kwargs)

    # copies to and from the host
    def get(self, stream=None):
        _refuse_sync("get()")
        return self._a.copy()

    def set(self, array, stream=None):
        assert type(array) is numpy.ndarray and array.shape == self.shape and array.dtype == self.dtype, "set: mismatch"
        assert array.flags.c_contiguous, "set: the host array must be C-contiguous"
        _enqueue(lambda: numpy.copyto(self._a, array), stream)

    def item(self):
        _refuse_sync("item()")
        return self._a.item()

    def tolist(self):
        return self.get().tolist()

    def __float__(self):
        return float(self.get())  # NumPy's (and so CuPy's) TypeError for more than one element

    def __int__(self):
        return int(self.get())

    def __bool__(self):
        return bool(self.get())

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return repr(self.get())

    # views and copies on the device
    def reshape(self, *shape):
        return _result(self._a.reshape(*shape), (self,))

    def transpose(self, *axes):
        return _result(self._a.transpose(*axes), (self,))

    def ravel(self):
        return _result(self._a.ravel(), (self,))

    def view(self, dtype=None):
        return _result(self._a.view(dtype), (self,))

    def astype(self, dtype, copy=True, **kwargs):
        if not copy and self.dtype == numpy.dtype(dtype):
            return self
        return _new(self._a.astype(dtype, **kwargs))

    def copy(self, order="C"):
        return _new(self._a.copy(order))

    def fill(self, value):
        _check_device((self, *_arrays_in(value)))
        if numpy.ndim(value._a if isinstance(value, FakeArray) else value) != 0:
            raise ValueError(f"non-scalar {type(value).__module__}.ndarray cannot be used for fill")
        _enqueue(lambda: self._a.fill(_unwrap(value, "fill")))

    def __getitem__(self, key):
        _check_device((self, *_arrays_in(key)))
        return _result(self._a[_unwrap(key, "indexing")], (self,))

    def __setitem__(self, key, value):
        """Assignment from a device array or a scalar; from host data only through ``fill``'s rule, as CuPy's
        ``_scatter_op`` does (gh-2079): a non-scalar NumPy array or list is refused."""
        _check_device((self, *_arrays_in((key, value))))
        if not isinstance(value, FakeArray) and numpy.ndim(value) != 0:
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        key, value = _unwrap(key, "indexing"), _unwrap(value, "setitem")
        _enqueue(lambda: self._a.__setitem__(key, value))

    # reductions and operators: CuPy's functions
    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        return _cupy().sum(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims)

    def max(self, axis=None, out=None, keepdims=False):
        return _cupy().max(self, axis=axis, out=out, keepdims=keepdims)

    def min(self, axis=None, out=None, keepdims=False):
        return _cupy().min(self, axis=axis, out=out, keepdims=keepdims)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        return _cupy().mean(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims)

    def all(self, axis=None, out=None, keepdims=False):
        return _cupy().all(self, axis=axis, out=out, keepdims=keepdims)

    def any(self, axis=None, out=None, keepdims=False):
        return _cupy().any(self, axis=axis, out=out, keepdims=keepdims)

    def argmax(self, axis=None, out=None):
        return _cupy().argmax(self, axis=axis, out=out)

    __hash__ = None


def _operator(name, reflected=False, in_place=False):
    def apply(self, other):
        function = getattr(_cupy(), name)
        if in_place:
            return function(self, other, out=self)
        return function(other, self) if reflected else function(self, other)

    return apply


for _name, _ufunc in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "divide"),
                      ("pow", "power"), ("matmul", "matmul"), ("and", "bitwise_and"), ("or", "bitwise_or")):
    setattr(FakeArray, f"__{_name}__", _operator(_ufunc))
    setattr(FakeArray, f"__r{_name}__", _operator(_ufunc, reflected=True))
    setattr(FakeArray, f"__i{_name}__", _operator(_ufunc, in_place=True))
for _name, _ufunc in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                      ("eq", "equal"), ("ne", "not_equal")):
    setattr(FakeArray, f"__{_name}__", _operator(_ufunc))
FakeArray.__neg__ = lambda self: _cupy().negative(self)
FakeArray.__abs__ = lambda self: _cupy().abs(self)
FakeArray.__invert__ = lambda self: _cupy().invert(self)


def _new(data: numpy.ndarray) -> FakeArray:
    """A result in a new device buffer (C-contiguous, as CuPy makes them), allocated through the allocator in use."""
    data = numpy.array(data, order="C", copy=True)  # its own memory, never the host's or an input's
    _allocate(data.nbytes)
    return FakeArray(data)


def _result(data, inputs) -> FakeArray:
    """A NumPy result as CuPy returns it: an input itself, a view of one, or a new buffer (0-d for a scalar)."""
    if not isinstance(data, (numpy.ndarray, numpy.generic)):
        return data  # a Python number (a host value, as from item())
    for a in inputs:
        if data is a._a:
            return a
        if isinstance(data, numpy.ndarray) and data.base is not None and numpy.may_share_memory(data, a._a):
            return FakeArray(data, a.base if a.base is not None else a, a._device)
    return _new(data)


def _arrays_in(value) -> list:
    if isinstance(value, FakeArray):
        return [value]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _arrays_in(v)]
    if isinstance(value, dict):
        return _arrays_in(list(value.values()))
    return []


def _unwrap(value, name, host=False):
    """Device arrays as their NumPy memory, for NumPy to compute with; a NumPy array is refused unless ``host``
    (functions that copy host data in), as CuPy refuses one ("Unsupported type")."""
    if isinstance(value, FakeArray):
        return value._a
    if type(value) is numpy.ndarray and not host and name != "indexing":
        raise TypeError(f"cupy.{name}: Unsupported type <class 'numpy.ndarray'>")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, name, host) for v in value)
    return value


def _cupy():
    return sys.modules["cupy"]


# -- cupy's functions ---------------------------------------------------------------------------------------
def _matmul_temporaries(a, b, out) -> list:
    """Bytes of the temporaries CuPy's matmul makes (``_routines_linalg.pyx``: ``matmul``, ``dot``,
    ``_mat_to_cublas_contiguous``); refuses ``out=`` with a 1-D operand."""
    if out is None:
        return []
    if a.ndim == 1 or b.ndim == 1:
        raise ValueError(f"cupy.matmul: out= with a 1-D operand ({a.shape} @ {b.shape}) fails in CuPy 13's "
                         "_GUFunc (emulated: CuPy's TestMatmulOut skips the case)")
    temporaries = []
    if max(a.ndim, b.ndim) <= 2:  # dot: an operand cuBLAS cannot take transposed is copied
        temporaries += [x.nbytes for x in (a, b) if not (x.flags.c_contiguous or x.flags.f_contiguous)]
    else:  # batched: operands made C-contiguous; a broadcast batch needs device arrays of matrix pointers
        temporaries += [x.nbytes for x in (a, b) if not x.flags.c_contiguous]
        if a.shape[:-2] != b.shape[:-2]:
            temporaries += [8 * int(numpy.prod(out.shape[:-2]))] * 3
    if not out.flags.c_contiguous or out.dtype != numpy.result_type(a.dtype, b.dtype):
        temporaries.append(out.nbytes)
    return temporaries


def _function(name, numpy_function):
    """``cupy.<name>``: NumPy's function on device arrays, with CuPy's refusals (module docstring).

    Called while capturing: with ``out=``, its work is kept for the graph; without, its result is a new
    buffer (allocated now, through the allocator in use) that each launch of the graph fills.
    """

    def call(*args, **kwargs):
        arrays = _arrays_in((args, kwargs))
        _check_device(arrays)
        out = kwargs.get("out")
        if name == "matmul":
            for nbytes in _matmul_temporaries(args[0], args[1], out):
                _allocate(nbytes)
        host = name in _FROM_HOST
        raw_args, raw_kwargs = _unwrap(args, name, host), {k: _unwrap(v, name, host) for k, v in kwargs.items()}
        if out is not None:
            _enqueue(lambda: numpy_function(*raw_args, **raw_kwargs))
            return out
        result = _result(numpy_function(*raw_args, **raw_kwargs), arrays)
        if _capturing() and isinstance(result, FakeArray) and result.base is None and all(result is not a for a in arrays):
            _enqueue(lambda: numpy.copyto(result._a, numpy_function(*raw_args, **raw_kwargs)))
        return result

    call.__name__ = name
    return call


class _Ufunc:
    """A CuPy ufunc: called, or its ``reduce``/``at`` where CuPy implements them."""

    def __init__(self, name):
        self.__name__ = name
        self._call = _function(name, getattr(numpy, name))

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def reduce(self, array, axis=0, dtype=None, out=None, keepdims=False):
        if self.__name__ not in _REDUCE:
            raise NotImplementedError(f"`cupy_{self.__name__}.reduce` is not supported yet")
        return _function(f"{self.__name__}.reduce", getattr(numpy, self.__name__).reduce)(
            array, axis=axis, dtype=dtype, out=out, keepdims=keepdims)

    def at(self, a, indices, b=None):
        if self.__name__ not in _AT:
            raise NotImplementedError(f"`cupy_{self.__name__}.at` is not supported yet")
        _check_device((a, *_arrays_in((indices, b))))
        raw = _unwrap(indices, "indexing"), _unwrap(b, f"{self.__name__}.at")
        _enqueue(lambda: getattr(numpy, self.__name__).at(a._a, *raw))


class OutOfMemoryError(MemoryError):
    pass


class PinnedMemoryPointer(bytearray):
    """Page-locked host memory, as the base of the NumPy arrays cupyx.empty_pinned returns."""


def _empty_pinned(shape, dtype):
    dtype = numpy.dtype(dtype)
    return numpy.ndarray(shape, dtype, buffer=PinnedMemoryPointer(max(1, int(numpy.prod(shape)) * dtype.itemsize)))


def _scatter_add(a, index, values):
    _Ufunc("add").at(a, index, values)


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
        self.names, self.device = set(name_expressions), _THREAD.device  # loaded on the current device

    def get_function(self, expression):
        assert expression in self.names, f"{expression} was not among the name expressions"
        name, arguments = re.fullmatch(r"(\w+)<(.*)>", expression).groups()
        names, signature = SIGNATURES[name]
        template = dict(zip(names, (a.strip() for a in arguments.split(","))))
        assert len(template) == len(names), f"{expression}: {len(names)} template arguments expected"
        return _Kernel(name, template, signature, self.device)


class _Kernel:
    """A kernel launch, checked against its C signature, then run by its NumPy transcription (at once, or by the
    launches of the graph being captured). A scalar parameter instantiated as a pointer (``S = const T*``) takes a
    one-element device array, read when the kernel runs."""

    def __init__(self, name, template, signature, device):
        self.name, self.T, self.signature, self.device = name, C_TYPES[template["T"]], [], device
        for kind, ctype in signature:
            resolved = template.get(ctype, ctype)
            if kind == "value" and resolved.endswith("*"):
                kind, resolved = "scalar pointer", resolved[:-1]
            self.signature.append((kind, ctype, C_TYPES[resolved.removeprefix("const ").strip()]))

    def __call__(self, grid, block, args):
        if self.device != _THREAD.device:  # a module is loaded into one device's context
            raise RuntimeError(f"{self.name}: CUDA_ERROR_INVALID_HANDLE: the kernel was loaded on device "
                               f"{self.device}, the current device is {_THREAD.device}")
        _check_device([a for a in args if isinstance(a, FakeArray)])
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
            flat = [None if type(a) is numpy.uint64 and kind == "pointer" else a._a.reshape(-1)[0]
                    if kind == "scalar pointer" else a._a.reshape(-1) if kind == "pointer" else a
                    for a, (kind, _, _) in zip(args, self.signature)]
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
    """``cupy`` and ``cupyx``: only the names listed (module docstring), as modules of their own."""
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "13.6.0 (emulated)"
    for name in UFUNCS:
        setattr(cupy, name, _Ufunc(name))
    for name in FUNCTIONS:
        setattr(cupy, name, _function(name, getattr(numpy, name)))
    for name in ("float32", "float64", "int64", "int32", "int16", "uint8", "uint64", "bool_", "dtype"):
        setattr(cupy, name, getattr(numpy, name))
    cupy.ndarray = FakeArray
    cupy.RawModule = _RawModule
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(total_bytes=lambda: 0, malloc=None)
    runtime = types.SimpleNamespace(getDeviceCount=lambda: DEVICES, memGetInfo=lambda: (2**30, 2**34),
                                    getDevice=lambda: _THREAD.device, setDevice=_set_device,
                                    CUDARuntimeError=RuntimeError)
    cupy.cuda = types.SimpleNamespace(Device=_Device, Stream=_Stream, Event=lambda disable_timing=False: _Event(),
                                      get_current_stream=_current_stream, using_allocator=_using_allocator,
                                      runtime=runtime, PinnedMemoryPointer=PinnedMemoryPointer,
                                      memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
    cupyx = types.ModuleType("cupyx")
    cupyx.empty_pinned = _empty_pinned
    cupyx.scatter_add = _scatter_add
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
    _THREAD.device = 0
    for name, (module, attribute) in saved.items():
        sys.modules.pop(name, None)
        if module is not None:
            sys.modules[name] = module
        short = name.rsplit(".", 1)[1]
        if attribute is not None:
            setattr(sigma_cuda, short, attribute)
        elif hasattr(sigma_cuda, short):
            delattr(sigma_cuda, short)

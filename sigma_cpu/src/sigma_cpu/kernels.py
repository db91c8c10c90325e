"""numba kernels for the hot paths of a training step; everything else is the NumPy reference.

:class:`NumbaKernels` overrides only what a training step spends its non-GEMM
time on, each time replacing a chain of NumPy calls (a pass over memory and a
Python-to-C round trip each) by one compiled loop:

* ``dense``: BLAS matmul into the pooled output, then bias + relu in one pass; on oneMKL
  (:mod:`sigma_cpu.blas`) the bias enters the product (beta = 1) and each
  column block is filled, multiplied and rectified by one thread (:func:`_gemm_blocks`);
* ``matmul`` of 2-D operands, on oneMKL: the same blocks, without the epilogue; ``matmul_into``
  the same into a given buffer (a plugin's kernel: a recurrent step's products);
* ``activation_backward``: g·f'(y) in one pass (relu, sigmoid, tanh);
* ``sum`` over the rows of a matrix (bias gradients): one pass, in NumPy's order;
* ``softmax_cross_entropy`` and its backward: one pass per row, cost included;
  ``label_range``, the check of its integer labels, in one pass;
* every optimiser update and ``l2_gradient`` (:class:`NumbaUpdates`): one pass over the parameter;
* ``dropout``: mask generation (a counter-based generator) and application in one pass.

Matrix products stay in BLAS; outputs come from the buffer pool. An override
that meets an array it was not written for (not C-contiguous, another dtype)
hands the call to the reference kernel. For recorded steps each override also
offers its compiled path as a *launch* (:meth:`NumbaKernels.launch`,
:meth:`NumbaUpdates.launch`): the loop's machine code bound to the call's
flattened buffers, its checks and numba's dispatch done once.

The passes over large arrays are written with ``prange`` and compiled twice:
serial, and ``parallel=True`` for when :mod:`sigma_cpu.blas_pool` has put BLAS on
numba's thread pool (without it a parallel pass fights OpenBLAS's spinning
threads and loses). Each element's result depends on that element alone, so
both give the same bits; below :data:`PARALLEL_MIN` elements the serial one runs.

Compilation (see :data:`_njit`): ``error_model="numpy"`` lets LLVM vectorise
loops containing a division (the default Python error model checks every
divisor for zero); the fast-math flags allow reassociation and fused
multiply-adds but not ``nnan``/``ninf``, so a diverging run still produces
the NaN the trainer stops on. The machine code is kept on disk
(:func:`sigma_cpu.numba_cache.cached`, configured before numba compiles).
"""

from __future__ import annotations

import functools
import math
import types

import numpy

from sigma_core import GOLDEN, ArrayKernels, CounterStreams, ShapeError, Updates

from . import blas, blas_pool, gemm, numba_cache, precompile

numba = numba_cache.import_numba()

FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}
#: Fast-math for loops whose sums must keep NumPy's order: no reassociation.
ORDERED = FASTMATH - {"reassoc"}

_njit = numba.njit(fastmath=FASTMATH, error_model="numpy", nogil=True)
#: Helpers of the loops, inlined into each (not compiled, cached and loaded on their own: 0.1 s and 3 ms each).
_inline = numba.njit(inline="always", fastmath=FASTMATH, error_model="numpy")


def _jit(function):
    """``function`` compiled serial, cached on disk."""
    return numba_cache.cached(_njit(function))

#: Below this many elements a pass stays serial even on the shared pool: handing
#: half of it to the other thread costs more than the half takes, or saves about a
#: microsecond (bias + relu on 2 cores: 46,080 elements 6.5 µs serial, 5.6 µs
#: parallel), which does not repay compiling the parallel twin (0.6 s, cold cache)
#: in a run whose passes are all that small (the digits example).
PARALLEL_MIN = 1 << 16


#: Every (serial, parallel) pair :func:`_serial_and_parallel` made: :mod:`sigma_cpu.precompile` compiles the
#: parallel twins of those the run's serial calls compiled.
PAIRS = []


def _serial_and_parallel(loop, fastmath=FASTMATH):
    """``loop`` (written with ``prange``) compiled serial, where ``prange`` is ``range``, and parallel, with the
    ``fastmath`` flags given (:data:`ORDERED` for a loop whose sums must keep their order).

    The parallel one compiles a renamed copy: numba's disk cache names entries
    after the function and does not tell the two compilations apart, so with
    one name a serial call could load the parallel machine code.
    """
    twin = types.FunctionType(loop.__code__, loop.__globals__, loop.__name__, loop.__defaults__, loop.__closure__)
    twin.__qualname__ = f"{loop.__qualname__}_parallel"
    twin.__doc__ = loop.__doc__
    serial = numba.njit(fastmath=fastmath, error_model="numpy", nogil=True)
    parallel = numba.njit(parallel=True, fastmath=fastmath, error_model="numpy", nogil=True)
    pair = numba_cache.cached(serial(loop)), numba_cache.cached(parallel(twin))
    PAIRS.append(pair)
    return pair


def _pick(compiled, size):
    """The parallel version of a :func:`_serial_and_parallel` pair when the shared pool is on, ``size`` is large
    and BLAS may use several threads (limited to one, as by data-parallel workers, the kernels keep to one too)."""
    return compiled[1] if blas_pool.PARALLEL and size >= PARALLEL_MIN and blas_pool.threads() > 1 else compiled[0]

#: Activation names as the integer codes the compiled loops branch on.
ACTIVATION_CODES = {"none": 0, "relu": 1, "sigmoid": 2, "tanh": 3}

_GOLDEN = numpy.uint64(GOLDEN)


# -- compiled loops -------------------------------------------------------------------------
@_inline
def _derivative(y, code):
    """f'(x) of sigmoid and tanh written in terms of the output y = f(x) (relu is a select in the caller)."""
    if code == 2:
        return y * (1 - y)
    if code == 3:
        return 1 - y * y
    return 1


@_serial_and_parallel
def _bias_relu(out, bias, use_bias, relu):
    """out += bias (row-broadcast), then max(out, 0); each row is still in L1 for the second loop."""
    rows, cols = out.shape
    for i in numba.prange(rows):
        row = out[i]
        if use_bias:
            for j in range(cols):
                row[j] += bias[j]
        if relu:
            for j in range(cols):
                if row[j] < 0:
                    row[j] = 0


#: Products of fewer multiply-adds than this run as one block on the calling thread: below it, handing a block
#: to the other thread costs about what the block takes. A first guess, not yet timed on a quiet machine
#: (BENCHMARKS.md, issue 38: ``benchmarks/gemm_providers.py`` compares one block with two).
GEMM_PARALLEL_MIN = 1 << 20
#: Column blocks start at multiples of this many elements (64 bytes of float32): no cache line is written by two
#: threads.
BLOCK_ALIGN = 16


@_inline
def _block_start(part, parts, cols):
    return cols if part == parts else part * cols // parts // BLOCK_ALIGN * BLOCK_ALIGN


@_serial_and_parallel
def _gemm_blocks(a, transpose_a, b, transpose_b, out, bias, use_bias, relu, alpha, parts):
    """out = op(a)·op(b) (+ bias) (then max(·, 0)) in ``parts`` column blocks, one per thread, through oneMKL.

    ``a``, ``b`` and ``out`` have contiguous rows, not necessarily next to each
    other (a step's slice ``[:, t]`` of a batch-major sequence): each row
    stride is the GEMM's leading dimension. ``transpose_*`` says the operand is
    the transpose of the array given. Each thread fills its block with the bias, multiplies into it
    (beta = 1: the bias enters the product, no pass adds it) and rectifies it
    while the block is in its cache: the passes of one block split the work
    the same way, so nothing moves between cores. A block's columns depend on
    its own columns of ``b`` only, so the result does not depend on the split
    beyond how oneMKL orders each column's sum for the block's width.
    """
    rows, cols = out.shape
    depth = a.shape[0] if transpose_a else a.shape[1]
    beta = alpha if use_bias else alpha - alpha
    op_a = gemm.TRANSPOSE if transpose_a else gemm.NO_TRANSPOSE
    op_b = gemm.TRANSPOSE if transpose_b else gemm.NO_TRANSPOSE
    lda, ldb, ldc = a.strides[0] // a.itemsize, b.strides[0] // b.itemsize, out.strides[0] // out.itemsize
    for part in numba.prange(parts):
        start, end = _block_start(part, parts, cols), _block_start(part + 1, parts, cols)
        if end > start:
            if use_bias:
                for i in range(rows):
                    for j in range(start, end):
                        out[i, j] = bias[j]
            gemm.cblas_gemm(op_a, op_b, rows, end - start, depth, alpha, a, 0, lda,
                            b, start * ldb if transpose_b else start, ldb, beta, out, start, ldc)
            if relu:
                for i in range(rows):
                    for j in range(start, end):
                        if out[i, j] < 0:
                            out[i, j] = 0


@_serial_and_parallel
def _activation_backward(g, y, out, code):
    if code == 1:  # a select, not a multiply: keeps the loop in the array dtype
        for i in numba.prange(out.size):
            out[i] = g[i] if y[i] > 0 else 0 * g[i]
    else:
        for i in numba.prange(out.size):
            out[i] = g[i] * _derivative(y[i], code)


@functools.partial(_serial_and_parallel, fastmath=ORDERED)
def _activation_backward_sums(g, y, out, sums, code, parts):
    """out = g·f'(y) (as :func:`_activation_backward`) and sums[j] = Σ_i out[i, j], a dense layer's gradient and
    its bias gradient, in one call: each row of ``out`` is added to the sums right after it is written, while in
    L1, instead of a second pass (and a second call) reading ``out`` back.

    ``parts`` threads take a block of columns each (all rows), so every column's
    sum adds row after row, NumPy's order for an axis-0 sum (:func:`_column_sums`),
    and the bits do not depend on the split.
    """
    rows, cols = out.shape
    for part in numba.prange(parts):
        start, end = _block_start(part, parts, cols), _block_start(part + 1, parts, cols)
        block = sums[start:end]  # views indexed from 0: no wrap-around checks, so the loops vectorise
        for i in range(rows):
            gi, yi, oi = g[i, start:end], y[i, start:end], out[i, start:end]
            if code == 1:  # relu: a select, as in _activation_backward
                for j in range(end - start):
                    oi[j] = gi[j] if yi[j] > 0 else 0 * gi[j]
            else:
                for j in range(end - start):
                    oi[j] = gi[j] * _derivative(yi[j], code)
            if i == 0:  # a loop, not ``block[:] = oi``: numba's slice assignment compiles a shape-error message
                for j in range(end - start):  # (string formatting: seconds on a cold cache)
                    block[j] = oi[j]
            else:
                for j in range(end - start):
                    block[j] += oi[j]


@_inline
def _softmax_row(logits, probabilities, i):
    """Writes softmax(logits[i]) into probabilities[i]; returns (row max, log Σ exp(logit − max))."""
    cols = logits.shape[1]
    top = logits[i, 0]
    for j in range(1, cols):
        top = max(top, logits[i, j])
    s = 0.0
    for j in range(cols):
        e = math.exp(logits[i, j] - top)
        probabilities[i, j] = e
        s += e
    inverse = 1.0 / s
    for j in range(cols):
        probabilities[i, j] *= inverse
    return top, math.log(s)


@numba_cache.cached
@numba.njit(error_model="numpy", nogil=True)  # no fast-math: the additions keep NumPy's order
def _column_sums(x, out):
    """out[j] = Σ_i x[i, j], adding row after row: NumPy's order for an axis-0 sum, so its bits."""
    rows, cols = x.shape
    for j in range(cols):
        out[j] = x[0, j]
    for i in range(1, rows):
        for j in range(cols):
            out[j] += x[i, j]


@_jit
def _label_range(labels):
    low = high = labels[0]
    for i in range(1, labels.size):
        low = min(low, labels[i])
        high = max(high, labels[i])
    return low, high


@_jit
def _softmax_ce_indices(logits, targets, probabilities):
    """Writes softmax rows into ``probabilities``; returns the summed cross-entropy."""
    rows, cols = logits.shape
    total = 0.0
    for i in range(rows):
        top, log_s = _softmax_row(logits, probabilities, i)
        t = targets[i]
        if t < 0 or t >= cols:
            raise IndexError("softmax_cross_entropy: a class index is out of range")
        total += log_s + top - logits[i, t]
    return total


@_jit
def _softmax_ce_probabilities(logits, targets, probabilities):
    """As :func:`_softmax_ce_indices`, against target distributions (rows summing to 1 or not)."""
    rows, cols = logits.shape
    total = 0.0
    for i in range(rows):
        top, log_s = _softmax_row(logits, probabilities, i)
        for j in range(cols):
            total -= targets[i, j] * (logits[i, j] - top - log_s)
    return total


@_jit
def _softmax_ce_backward_indices(probabilities, targets, scale, out):
    rows, cols = probabilities.shape
    for i in range(rows):
        for j in range(cols):
            out[i, j] = probabilities[i, j] * scale
        t = targets[i]
        if t < 0 or t >= cols:
            raise IndexError("softmax_cross_entropy: a class index is out of range")
        out[i, t] -= scale


@_jit
def _softmax_ce_backward_probabilities(probabilities, targets, scale, out):
    """(mass·p − t)·scale per row, mass = Σ t over the row: the cost weights log Z by it."""
    rows, cols = probabilities.shape
    for i in range(rows):
        mass = 0.0
        for j in range(cols):
            mass += targets[i, j]
        for j in range(cols):
            out[i, j] = (probabilities[i, j] * mass - targets[i, j]) * scale


@_inline
def _mix64(z):
    """splitmix64's output function: a bijective avalanche of 64 bits."""
    z = (z ^ (z >> numpy.uint64(30))) * numpy.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> numpy.uint64(27))) * numpy.uint64(0x94D049BB133111EB)
    return z ^ (z >> numpy.uint64(31))


@_serial_and_parallel
def _dropout(x, stream, threshold, scale, y, mask):
    """Element i is kept when the top 53 bits of mix(stream + (i+1)·golden) fall below threshold.

    That is the splitmix64 sequence seeded with ``stream``, indexed rather than
    iterated, so each element's draw depends on (stream, i) alone: the result
    does not depend on how the loop is split between threads.
    """
    for i in numba.prange(x.size):
        z = _mix64(stream + numpy.uint64(i + 1) * _GOLDEN)
        m = scale if (z >> numpy.uint64(11)) < threshold else 0 * scale
        mask[i] = m
        y[i] = x[i] * m


@_serial_and_parallel
def _l2_gradient(grad, param, out, weight_decay):
    for i in numba.prange(out.size):
        out[i] = grad[i] + weight_decay * param[i]


@_serial_and_parallel
def _sgd(param, grad, lr):
    for i in numba.prange(param.size):
        param[i] -= lr * grad[i]


@_serial_and_parallel
def _adam(param, grad, m, v, step_size, beta1, rest1, beta2, rest2, root_correction, eps):
    for i in numba.prange(param.size):
        mi = beta1 * m[i] + rest1 * grad[i]
        vi = beta2 * v[i] + rest2 * grad[i] * grad[i]
        m[i] = mi
        v[i] = vi
        param[i] -= step_size * mi / (math.sqrt(vi) * root_correction + eps)


# -- the kernels ----------------------------------------------------------------------------------
def _entry(loop, *args):
    """The machine code ``loop`` (a numba dispatcher) compiled for ``args``' types, called without dispatch."""
    try:
        return loop.overloads[tuple(map(loop.typeof_pyval, args))].entry_point
    except KeyError:  # not compiled for these types (yet): the dispatcher compiles
        return loop


def _rows_contiguous(x) -> bool:
    """Whether a 2-D array's rows are each contiguous and do not overlap: BLAS's row-major operand, the row
    stride its leading dimension."""
    item = x.itemsize
    return x.strides[1] == item and x.strides[0] >= x.shape[1] * item and x.strides[0] % item == 0


def _c_contiguous(*arrays) -> bool:
    for a in arrays:  # a loop, not all(...): checked on every hot kernel call
        if not a.flags.c_contiguous:
            return False
    return True


#: The core's update rules' compiled loops, by rule name: each takes the arrays, then the rule's ``scalars``. A
#: distribution's rule brings its own as its ``cpu`` kernel's ``loop`` (docs/plugins.md, "Update rules").
LOOPS = {"sgd": _sgd, "adam": _adam}


class NumbaUpdates(Updates):
    """:class:`~sigma_core.Updates` as one compiled pass over each parameter (parallel on the shared pool)."""

    handler_name = "cpu"

    def __init__(self, kernels):
        super().__init__(kernels)
        self.dtype, self._scalar = kernels.dtype, kernels.dtype.type

    def _fits(self, arrays) -> bool:
        """Whether every array is C-contiguous in the handler's dtype (else the reference runs)."""
        dtype = self.dtype
        for a in arrays:  # a loop, not all(...): this runs for every parameter on every step
            if not a.flags.c_contiguous or a.dtype != dtype:
                return False
        return True

    def _scalars(self, scalars) -> list:
        s = self._scalar
        return [x if type(x) is bool else s(x) for x in scalars]

    def _run(self, loop, arrays, *scalars) -> bool:
        """Run the compiled ``loop`` on 1-D views of ``arrays`` and ``scalars`` (floats in the array dtype); False,
        running nothing, unless :meth:`_fits`.

        (Here and in the other kernels, ``ravel()`` of a C-contiguous array is the
        same view as ``reshape(-1)`` at half the cost.)
        """
        if not self._fits(arrays):
            return False
        _pick(loop, arrays[0].size)(*[a.ravel() for a in arrays], *self._scalars(scalars))
        return True

    @staticmethod
    def _loop(name, rule):
        """The compiled loop running ``rule`` (registered as ``name``): its ``cpu`` kernel's, or the core's; or None."""
        return getattr(rule, "loop", None) or LOOPS.get(name)

    def compiled(self, name, rule):
        """The rule's compiled loop on arrays that fit (:meth:`_run`), or None where it has none."""
        loop = self._loop(name, rule)
        return None if loop is None else functools.partial(self._run, loop)

    def launch(self, name, args, kwargs, result):
        """A rule's compiled loop on its flattened arrays, bound to hyperparameters given later (as Python floats:
        the compiled entry point rounds them to the array dtype as NumPy does)."""
        rule = self.rules.get(name)
        loop = rule and self._loop(name, rule)
        if not loop or not self._fits(args):
            return None
        scalars = rule.scalars
        flat = [a.ravel() for a in args]
        entry = functools.partial(_entry(_pick(loop, args[0].size), *flat, *self._scalars(scalars(**kwargs))), *flat)
        return lambda **hyperparameters: functools.partial(entry, *scalars(**hyperparameters))

    def l2_gradient(self, grad, param, weight_decay):
        out = self.empty(param.shape)
        if not self._run(_l2_gradient, (grad, param, out), weight_decay):
            return super().l2_gradient(grad, param, weight_decay)
        return out


class NumbaKernels(ArrayKernels):
    """:class:`ArrayKernels` with the training step's hot paths compiled by numba."""

    updates_class = NumbaUpdates

    def __init__(self, dtype, seed=None):
        super().__init__(dtype, seed)
        self.provider = blas.load()  # before precompiling: the helper's kernels call what it binds
        precompile.start(self.dtype)  # a first run on this machine: compile on another core too
        blas_pool.install()
        self._scalar = self.dtype.type  # hyperparameters enter the loops in the array dtype
        self.streams = CounterStreams(seed)  # dropout's, shared with sigma_cuda's hash

    # -- matrix products on oneMKL ------------------------------------------------------------
    def _operand(self, x):
        """``(array with contiguous rows, transposed)`` for a non-empty 2-D operand of our dtype whose rows or
        columns are contiguous (a step's slice of a sequence; a transposed view: the backward pass's ``x.T``),
        else None."""
        if x.ndim != 2 or x.dtype != self.dtype or x.size == 0:
            return None
        if _rows_contiguous(x):
            return x, False
        return (x.T, True) if _rows_contiguous(x.T) else None

    def _blocks(self, x, y, out=None, bias=None, relu=False):
        """``(loop, arguments)`` computing x·y (+ bias) (relu) into ``out`` (``arguments[4]``; a pooled buffer
        when None) with :func:`_gemm_blocks`, or None where the provider is not oneMKL or an operand does not fit.
        Small products run as one block on this thread."""
        if self.provider != "mkl" or x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[0]:
            return None
        if (a := self._operand(x)) is None or (b := self._operand(y)) is None:
            return None
        rows, cols = x.shape[0], y.shape[1]
        out = self.empty((rows, cols)) if out is None else out
        if out.shape != (rows, cols) or out.dtype != self.dtype or not _rows_contiguous(out):
            return None
        big = blas_pool.PARALLEL and rows * cols * x.shape[1] >= GEMM_PARALLEL_MIN and blas_pool.threads() > 1
        parts = blas_pool.threads() if big else 1
        arguments = (*a, *b, out, out[0] if bias is None else bias, bias is not None, relu, self._scalar(1), parts)
        return _gemm_blocks[1 if big else 0], arguments

    def matmul(self, x, y):
        """2-D products through oneMKL when it is the provider (see :meth:`_blocks`), else NumPy's."""
        blocks = self._blocks(x, y)
        if blocks is None:
            return super().matmul(x, y)
        loop, arguments = blocks
        loop(*arguments)
        return arguments[4]

    def matmul_into(self, x, y, out):
        """out = x·y for 2-D operands, through the provider: what a ``cpu`` kernel of a plugin's op calls for the
        products it writes into buffers of its own (a recurrent step's, into a slice of a sequence), where
        ``k.xp.matmul(..., out=)`` would always take NumPy's OpenBLAS. Returns ``out``."""
        blocks = self._blocks(x, y, out)
        if blocks is None:
            return numpy.matmul(x, y, out=out)
        loop, arguments = blocks
        loop(*arguments)
        return out

    # -- fused forward and backward ---------------------------------------------------------
    def dense(self, x, weights, bias, activation):
        """The product with its bias and relu: on oneMKL all in :func:`_gemm_blocks`, else BLAS matmul into the
        pooled output, then bias and relu in one compiled pass.

        sigmoid, tanh and softplus stay with NumPy: without Intel's SVML numba
        calls the scalar libm per element, several times slower than NumPy's
        SIMD ufuncs.
        """
        if activation not in ("none", "relu"):
            return super().dense(x, weights, bias, activation)
        blocks = self._dense_blocks(x, weights, bias, activation)
        if blocks is not None:
            loop, arguments = blocks
            loop(*arguments)
            return arguments[4]
        out = self.matmul(x, weights)
        if bias is not None and bias.shape != out.shape[-1:]:
            raise ShapeError(f"dense: bias shape {bias.shape} does not match output shape {out.shape}")
        if out.ndim == 0 or (bias is None and activation == "none"):  # nothing to fuse
            return super().dense(x, weights, bias, activation) if out.ndim == 0 else out
        rows = out.reshape(-1, out.shape[-1])
        _pick(_bias_relu, rows.size)(rows, rows[0] if bias is None else bias, bias is not None, activation == "relu")
        return out

    def _dense_blocks(self, x, weights, bias, activation, out=None):
        """:meth:`_blocks` for a dense layer with a bias of the right shape, or None."""
        if bias is not None and bias.shape != weights.shape[1:]:
            return None  # the reference path names the mismatch
        return self._blocks(x, weights, out, bias, activation == "relu")

    def activation_backward(self, name, g, y):
        if name == "none":
            return g
        if not self._fits_activation_backward(name, g, y):
            return super().activation_backward(name, g, y)
        out = self.empty(y.shape)
        _pick(_activation_backward, out.size)(g.ravel(), y.ravel(), out.ravel(), ACTIVATION_CODES[name])
        return out

    def activation_backward_sum(self, name, g, y, sums):
        """The gradient and its column sums (a dense layer's bias gradient) in one compiled pass
        (:func:`_activation_backward_sums`), split over the threads by column blocks when large."""
        if not self._fits_activation_backward_sum(name, g, y, sums):
            return super().activation_backward_sum(name, g, y, sums)
        out, column_sums = self.empty(y.shape), self.empty(y.shape[1:])
        self._activation_backward_sums(name, g, y, out, column_sums)()
        return out, column_sums

    def _fits_activation_backward_sum(self, name, g, y, sums) -> bool:
        return name != "none" and sums and self._fits_activation_backward(name, g, y) and self._fits_sum(g, 0)

    @staticmethod
    def _activation_backward_sums(name, g, y, out, sums, entry=False):
        """:func:`_activation_backward_sums` on these arrays as a call of no arguments (compiled machine code
        bound to them where ``entry``: a launch)."""
        compiled = _pick(_activation_backward_sums, out.size)
        parts = 1 if compiled is _activation_backward_sums[0] else blas_pool.threads()
        arguments = (g, y, out, sums, ACTIVATION_CODES[name], parts)
        return functools.partial(_entry(compiled, *arguments) if entry else compiled, *arguments)

    @staticmethod
    def _fits_activation_backward(name, g, y) -> bool:
        return name in ACTIVATION_CODES and g.shape == y.shape and _c_contiguous(g, y) and g.dtype == y.dtype

    def _fits_sum(self, x, axis=None, keepdims=False) -> bool:
        return (axis == 0 and not keepdims and x.ndim == 2 and x.shape[0] > 0 and x.dtype == self.dtype
                and _c_contiguous(x))

    def sum(self, x, axis=None, keepdims=False):
        """Column sums (bias gradients) in one compiled pass; NumPy's axis-0 reduction spends
        ~3 µs setting up on arrays this small."""
        if self._fits_sum(x, axis, keepdims):
            out = self.empty(x.shape[1:])
            _column_sums(x, out)
            return out
        return super().sum(x, axis, keepdims)

    def _fits_softmax_ce(self, logits, targets) -> bool:
        """Whether the compiled loops apply: 2-D logits of our dtype, one label or one row of targets per row."""
        expected = logits.shape[:1] if targets.dtype.kind in "iu" else logits.shape
        return (
            logits.ndim == 2 and logits.dtype == self.dtype and targets.shape == expected
            and _c_contiguous(logits, targets)
        )

    def label_range(self, labels):
        """One compiled pass instead of NumPy's min and max (two reductions of ~1.5 µs each per step)."""
        if labels.ndim != 1 or labels.size == 0:
            return super().label_range(labels)
        low, high = _label_range(labels)
        return int(low), int(high)

    def softmax_cross_entropy(self, logits, targets):
        """Probabilities and the mean cost in one pass per row (max, exp, sum, log, pick)."""
        if not self._fits_softmax_ce(logits, targets):
            return super().softmax_cross_entropy(logits, targets)
        probabilities = self.empty(logits.shape)
        if targets.dtype.kind in "iu":
            total = _softmax_ce_indices(logits, targets, probabilities)
        else:
            total = _softmax_ce_probabilities(logits, targets, probabilities)
        cost = self.empty(())
        cost[()] = total / logits.shape[0]
        return cost, probabilities

    def softmax_cross_entropy_backward(self, g, probabilities, targets):
        if not self._fits_softmax_ce(probabilities, targets):
            return super().softmax_cross_entropy_backward(g, probabilities, targets)
        out = self.empty(probabilities.shape)
        scale = self._scalar(float(g) / probabilities.shape[0])
        if targets.dtype.kind in "iu":
            _softmax_ce_backward_indices(probabilities, targets, scale, out)
        else:
            _softmax_ce_backward_probabilities(probabilities, targets, scale, out)
        return out

    # -- launches for recorded steps ----------------------------------------------------------------
    def launch(self, name, args, kwargs, result):
        """The compiled path of the hot kernels above, with its checks made once (sigmann-replay's *launch*);
        None where the recorded call took the reference path."""
        blocks = None
        if name == "dense" and not kwargs and args[3] in ("none", "relu"):
            blocks = self._dense_blocks(*args, out=result)
        elif name == "matmul" and not kwargs and result.ndim == 2:
            blocks = self._blocks(*args, result)
        if blocks is not None:  # on oneMKL
            loop, arguments = blocks
            return functools.partial(_entry(loop, *arguments), *arguments)
        if name == "dense":
            x, weights, bias, activation = args
            if kwargs or activation not in ("none", "relu") or (bias is None and activation == "none") \
                    or not (x.ndim == weights.ndim == result.ndim == 2):
                return None
            matmul = functools.partial(numpy.matmul, x, weights, out=result)
            fused = (result, result[0] if bias is None else bias, bias is not None, activation == "relu")
            bias_relu = functools.partial(_entry(_pick(_bias_relu, result.size), *fused), *fused)
            return lambda: (matmul(), bias_relu())
        if name == "activation_backward" and args[0] != "none" and self._fits_activation_backward(*args, **kwargs):
            flat = (args[1].ravel(), args[2].ravel(), result.ravel(), ACTIVATION_CODES[args[0]])
            return functools.partial(_entry(_pick(_activation_backward, result.size), *flat), *flat)
        if name == "activation_backward_sum" and not kwargs and self._fits_activation_backward_sum(*args):
            return self._activation_backward_sums(*args[:3], *result, entry=True)
        if name == "activation_backward_sum" and args[0] == "none" and args[3] and self._fits_sum(args[1], 0):
            g, sums = args[1], result[1]  # the gradient passes through: only its column sums
            return functools.partial(_entry(_column_sums, g, sums), g, sums)
        if name == "sum" and self._fits_sum(*args, **kwargs):
            return functools.partial(_entry(_column_sums, args[0], result), args[0], result)
        if name == "softmax_cross_entropy" and not kwargs and self._fits_softmax_ce(*args):
            (logits, targets), (cost, probabilities) = args, result
            loop = _softmax_ce_indices if targets.dtype.kind in "iu" else _softmax_ce_probabilities
            total = functools.partial(_entry(loop, logits, targets, probabilities), logits, targets, probabilities)

            def softmax_cross_entropy():
                cost[()] = total() / logits.shape[0]

            return softmax_cross_entropy
        if name == "softmax_cross_entropy_backward" and not kwargs and self._fits_softmax_ce(*args[1:]):
            g, probabilities, targets = args
            loop = _softmax_ce_backward_indices if targets.dtype.kind in "iu" else _softmax_ce_backward_probabilities
            rows, loop = probabilities.shape[0], _entry(loop, probabilities, targets, self._scalar(1.0), result)
            return lambda: loop(probabilities, targets, float(g) / rows, result)
        if name == "dropout" and not kwargs and _c_contiguous(args[0]) and args[0].dtype == self.dtype:
            return self._dropout_pass(*args, *result, entry=True)
        return None

    # -- dropout with a counter-based generator --------------------------------------------------
    def dropout(self, x, p):
        """Mask and output in one pass; see :func:`_dropout` for the generator.

        Call number c draws from the splitmix64 stream keyed mix(key + c·golden),
        so a run is reproducible from (seed, number of dropout calls) alone.
        """
        if not _c_contiguous(x) or x.dtype != self.dtype:
            return super().dropout(x, p)
        y, mask = self.empty(x.shape), self.empty(x.shape)
        self._dropout_pass(x, p, y, mask)()
        return y, mask

    def _dropout_pass(self, x, p, y, mask, entry=False):
        """The dropout pass as a callable that draws the next stream each time it runs."""
        keep = 1.0 - p
        threshold, scale = numpy.uint64(min(int(keep * 2.0**53), 2**53)), self._scalar(1.0 / keep)
        loop, flat = _pick(_dropout, x.size), (x.ravel(), y.ravel(), mask.ravel())
        if entry:
            loop = _entry(loop, flat[0], numpy.uint64(0), threshold, scale, *flat[1:])

        def run():
            loop(flat[0], numpy.uint64(self.streams.next()), threshold, scale, *flat[1:])

        return run

    def rng_state(self) -> dict:
        return self.streams.save(super().rng_state())

    def set_rng_state(self, state: dict):
        super().set_rng_state(state)
        self.streams.load(state)


"""The computation handler: the only thing that touches live data.

Layers, optimisers and hooks call a handler's ops on :class:`~sigma_core.compute.ndarray.NDArray` handles: every
differentiable one is a registered :class:`~sigma_core.compute.ops.Op`, the core's as a plugin's, run by
:meth:`Handler.op` (``handler.add(a, b)`` is a shorthand for ``handler.op("add", a, b)``). The handler runs an op's
rules with its kernels (:class:`~sigma_core.compute.kernels.ArrayKernels` or a backend's subclass), records it on the
active tape so gradients come for free, and recycles buffers between iterations (sessions). A backend sets ``name`` and
``kernels_class`` and, if it may not run everywhere, overrides :meth:`Handler.availability`.
"""

import contextlib
import inspect
import numbers

import numpy

from sigma_core.compute import ops
from sigma_core.compute.autodiff import Tape
from sigma_core.errors import ShapeError, SigmaError
from sigma_core.compute.kernels import ArrayKernels
from sigma_core.compute.ndarray import NDArray, Number

DTYPES = ("float32", "float64")


def _shorthand(name: str, doc: str, inputs: str = "a, b"):
    """``handler.<name>(a, b)``: :meth:`Handler.op` of the core op ``name`` (:mod:`sigma_core.compute.ops`) on
    ``inputs``, named in its signature for ``help()`` and docs/ops.md."""

    def shorthand(self, *arrays):
        return self.op(name, *arrays)

    shorthand.__name__, shorthand.__doc__ = name, doc
    shorthand.__signature__ = inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                                 for p in ("self", *inputs.split(", "))])
    return shorthand


def _comparison(name: str, symbol: str):
    """A boolean mask of ``a <symbol> b``, wrapped but never recorded."""

    def compare(self, a, b):
        return self._wrap(self.kernels.compare(name, self._raw(a), self._raw(b)))

    compare.__name__, compare.__doc__ = name, f"A mask, 1 where ``a {symbol} b`` (NumPy broadcasting), else 0."
    return compare


class Handler:
    """Base computation handler; see the module docstring."""

    name = "base"
    kernels_class = ArrayKernels

    def __init__(self, dtype="float32", seed=None):
        dtype = str(numpy.dtype(dtype))
        if dtype not in DTYPES:
            raise SigmaError(f"handler {self.name!r}: dtype {dtype!r} is not supported "
                             f"(choose one of {', '.join(DTYPES)})")
        self.dtype = dtype
        self.seed = seed
        self.kernels = self.kernels_class(dtype, seed)
        self.kernels.updates.handler_name = self.name  # update rules' kernels are found by the handler's name
        self._tape = None
        #: What watches this handler while a training step is recorded (:meth:`record`), or None.
        self.recorder = None
        #: Bumped when an array gets another buffer (:meth:`share`): a compiled step holding raw buffers compares it.
        self.version = 0
        self._session_arrays = None  # arrays made in the open session; None while none is open
        self._ended_arrays = ()  # the last ended session's arrays: readable until the next session begins
        self._ops = {}  # op name -> (its check or None, its forward, its VJP), resolved on first use

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        """Whether this handler can run on this machine, and if not, why."""
        return True, ""

    def __repr__(self):
        return f"<{type(self).__name__} {self.name} {self.dtype}>"

    # -- wrapping ------------------------------------------------------------------
    def _wrap(self, raw):
        array = (Number if raw.ndim == 0 else NDArray)(raw, self)
        if self._session_arrays is not None:
            self._session_arrays.append(array)
        return array

    def _raw(self, x):
        if isinstance(x, NDArray):
            if x.handler is not self:
                raise SigmaError(f"an array of handler {x.handler!r} was passed to handler {self!r}; "
                                 "move it with handler.asarray(array.to_numpy())")
            return x._data if x._data is not None else x.data  # .data raises the expiry error
        if isinstance(x, numbers.Number):
            return x
        raise TypeError(f"expected an NDArray of this handler or a Python number, got {type(x).__name__}; "
                        "wrap host data with handler.asarray()")

    # -- creation and copies --------------------------------------------------------------
    def asarray(self, host_array) -> NDArray:
        """Copy host data (anything NumPy accepts) into a new handler array."""
        return self._wrap(self.kernels.asarray(host_array))

    def adopt(self, host_array) -> NDArray:
        """:meth:`asarray` of host data the caller hands over and won't change (a batch): may skip the copy."""
        return self._wrap(self.kernels.adopt(host_array))

    def to_numpy(self, array: NDArray):
        """A NumPy copy of ``array``'s data (waits for pending work on a device)."""
        return self.kernels.to_host(self._raw(array))

    def host_view(self, array: NDArray):
        """``array``'s own buffer, no copy, on a host handler (None on a device): data-parallel workers add
        up their gradients in place."""
        return self._raw(array) if self.kernels.xp is numpy else None

    def share(self, array: NDArray, buffer) -> None:
        """Make ``array`` use another host array of its shape and dtype as its buffer, no copy: data-parallel
        workers read the global parameters in place."""
        if self.host_view(array) is None or buffer.shape != array.shape or buffer.dtype != array.data.dtype:
            raise SigmaError(f"handler {self!r}: cannot share a {buffer.dtype} buffer of shape {buffer.shape}")
        array._data = buffer
        self.version += 1  # a compiled step may hold the old buffer

    def zeros(self, shape) -> NDArray:
        """A new array of zeros (``shape``: an int or a tuple)."""
        return self.full(shape, 0.0)

    def ones(self, shape) -> NDArray:
        """A new array of ones."""
        return self.full(shape, 1.0)

    def full(self, shape, value) -> NDArray:
        """A new array with every element ``value``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return self._wrap(self.kernels.full(shape, value))

    def number(self, value, dtype=None) -> Number:
        """A scalar; ``dtype`` (default: the handler's) may be float64 for an accumulator."""
        return self._wrap(self.kernels.full((), value, dtype))

    # -- the core's ops by name (sigma_core.compute.ops; NumPy broadcasting) ------------------------------
    copy = _shorthand("copy", "A new array with ``a``'s values.", "a")
    add = _shorthand("add", "``a + b``.")
    subtract = _shorthand("subtract", "``a - b``.")
    multiply = _shorthand("multiply", "``a * b``, elementwise.")
    divide = _shorthand("divide", "``a / b``.")
    power = _shorthand("power", "``a ** b``.")
    maximum = _shorthand("maximum", "The larger of ``a`` and ``b``, elementwise.")
    matmul = _shorthand("matmul", "``a @ b``, the matrix product (batched over leading axes).")
    negative = _shorthand("negative", "``-a``.", "a")
    exp = _shorthand("exp", "e to the ``a``.", "a")
    log = _shorthand("log", "The natural logarithm of ``a``.", "a")
    sqrt = _shorthand("sqrt", "The square root of ``a``.", "a")
    abs = _shorthand("abs", "``|a|``.", "a")
    sign = _shorthand("sign", "-1, 0 or 1 by the sign of ``a`` (its gradient is 0).", "a")
    tanh = _shorthand("tanh", "The hyperbolic tangent of ``a``.", "a")
    sigmoid = _shorthand("sigmoid", "``1 / (1 + exp(-a))``.", "a")
    relu = _shorthand("relu", "``max(a, 0)``.", "a")
    softplus = _shorthand("softplus", "``log(1 + exp(a))``, computed stably.", "a")

    def clip(self, a, low, high):
        """``a`` limited to [``low``, ``high``] (its gradient is 0 outside)."""
        return self.op("clip", a, low=low, high=high)

    def softmax(self, a, axis=-1):
        """``exp(a) / sum(exp(a))`` along ``axis``, computed stably."""
        return self.op("softmax", a, axis=axis)

    def log_softmax(self, a, axis=-1):
        """``log(softmax(a))`` along ``axis``, computed stably."""
        return self.op("log_softmax", a, axis=axis)

    # -- comparisons and selection (masks are not differentiable) -------------------------------
    greater = _comparison("greater", ">")
    greater_equal = _comparison("greater_equal", ">=")
    less = _comparison("less", "<")
    less_equal = _comparison("less_equal", "<=")
    equal = _comparison("equal", "==")
    not_equal = _comparison("not_equal", "!=")

    where = _shorthand("where", "``a`` where ``condition`` (a mask) holds, else ``b``.", "condition, a, b")

    # -- reductions over an axis (an int, a tuple, or None: every axis) ---------------------------
    def sum(self, a, axis=None, keepdims=False):
        """The sum over ``axis``."""
        return self.op("sum", a, axis=axis, keepdims=keepdims)

    def mean(self, a, axis=None, keepdims=False):
        """The mean over ``axis``."""
        return self.op("mean", a, axis=axis, keepdims=keepdims)

    def max(self, a, axis=None, keepdims=False):
        """The largest element over ``axis`` (the gradient goes to the largest, shared between ties)."""
        return self.op("max", a, axis=axis, keepdims=keepdims)

    def min(self, a, axis=None, keepdims=False):
        """The smallest element over ``axis``."""
        return self.op("min", a, axis=axis, keepdims=keepdims)

    def argmax(self, a, axis=None):
        """The index of the largest element over ``axis`` (integers, not differentiable)."""
        return self._wrap(self.kernels.argmax(self._raw(a), axis=axis))

    # -- shapes, indexing, joining ------------------------------------------------------------
    def reshape(self, a, shape):
        """``a``'s elements in ``shape`` (one axis may be -1)."""
        return self.op("reshape", a, shape=tuple(shape))

    def transpose(self, a, axes=None):
        """``a`` with its axes in the order ``axes`` (None: reversed)."""
        return self.op("transpose", a, axes=None if axes is None else tuple(axes))

    def permute(self, a, *axes):
        """:meth:`transpose` with the axes as arguments: ``permute(a, 0, 2, 1)``."""
        return self.transpose(a, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes)

    def getitem(self, a, index):
        """``a[index]``: NumPy basic and integer-array indexing."""
        return self.op("getitem", a, index=self._raw(index) if isinstance(index, NDArray) else index)

    def concatenate(self, arrays, axis=0):
        """The ``arrays`` joined along an existing ``axis``."""
        return self.op("concatenate", *arrays, axis=axis)

    def stack(self, arrays, axis=0):
        """The ``arrays`` (of one shape) joined along a new ``axis``."""
        return self.op("stack", *arrays, axis=axis)

    # -- fused ops: one kernel forward, one back; backends override the kernels ------------------
    def dense(self, x, weights, bias=None, activation="none"):
        """activation(x @ weights + bias), fused. ``activation`` is a built-in name."""
        if bias is None:
            return self.op("dense", x, weights, activation=activation)
        return self.op("dense", x, weights, bias, activation=activation)

    def softmax_cross_entropy(self, logits, targets) -> Number:
        """Mean cross-entropy of row-wise softmax(logits), numerically stable, against class
        probabilities of the logits' shape (e.g. one-hot) or integer class labels, one per row."""
        labels, classes = self._raw(targets), logits.shape[-1]
        if labels.dtype.kind in "iu":  # checked here, once for every handler: NumPy indexing would wrap -1 silently
            if self.recorder is None:
                self._check_labels(labels, classes)
            else:
                self.recorder.check(self._check_labels, labels, classes)
        return self.op("softmax_cross_entropy", logits, targets)

    def _check_labels(self, labels, classes):
        low, high = self.kernels.label_range(labels)
        if low < 0 or high >= classes:
            raise ShapeError(f"softmax_cross_entropy: class label {low if low < 0 else high} is outside "
                             f"0..{classes - 1} (the logits have {classes} classes)")

    def dropout(self, x, p):
        """Inverted dropout (training only): zero with probability p, rescale by 1/(1-p)."""
        return self.op("dropout", x, p=p)

    # -- every differentiable op (sigma_core.Op, registered through register_ops) ----------------------
    def op(self, name, *inputs, **params):
        """Run the op registered as ``name`` (the core's or a distribution's) on ``inputs`` (arrays or numbers),
        with ``params`` (plain values) as keywords; recorded on the tape with the op's backward rule as its VJP.

        Its kernel for this handler if registered, else its portable rule: chosen on first use and kept.
        """
        resolved = self._ops.get(name)
        if resolved is None:
            resolved = self._ops[name] = self._resolve_op(name)
        check, forward, vjp = resolved
        raws = tuple([self._raw(x) for x in inputs])
        if check is not None:
            check(raws, params)
        if type(result := forward(self.kernels, *raws, **params)) is not tuple or len(result) != 2:  # the contract
            raise SigmaError(f"op {name!r}: its forward returned {type(result).__name__}, not the pair (out, saved)")
        out = self._wrap(result[0])
        self._record(inputs, raws, out, vjp, (result[1], params))  # result[1]: what the op saved for its backward
        return out

    def _resolve_op(self, name):
        """``(check, forward, vjp)``: the rules called directly where they go through the kernels only (the core's
        ops: a recorded step sees each kernel call), else through ``kernels.run_op`` as one call; no check where
        the op has none (the base class's does nothing, and ops run on every step)."""
        op = ops.resolve(name, self.name)
        check = None if type(op).check is ops.Op.check else op.check
        rules = op.forward, op.backward
        if op.through_kernels:
            forward, backward = rules

            def vjp(k, g, raw_inputs, raw_out, saved, needs):
                return backward(k, g, raw_inputs, raw_out, saved[0], needs, **saved[1])
        else:
            def forward(k, *raws, **params):
                return k.run_op(rules[0], *raws, **params)

            def vjp(k, g, raw_inputs, raw_out, saved, needs):
                return k.run_op(rules[1], g, raw_inputs, raw_out, saved[0], needs, **saved[1])

        vjp.__name__ = name
        return check, forward, vjp

    def _record(self, inputs, raws, out, vjp, saved):
        """Put the op on the active tape if one of its inputs is traced (a loop: called for every op)."""
        tape = self._tape
        if tape is not None:
            for x in inputs:
                if getattr(x, "_node", None) is not None:
                    tape.record(out, inputs, raws, out._data, vjp, saved)
                    return

    # -- random ------------------------------------------------------------------------------
    def uniform(self, shape, low=0.0, high=1.0) -> NDArray:
        """Uniform random numbers in [``low``, ``high``), from the handler's seeded generator."""
        return self._wrap(self.kernels.uniform(tuple(shape), low, high))

    def normal(self, shape, mean=0.0, std=1.0) -> NDArray:
        """Normal random numbers, from the handler's seeded generator."""
        return self._wrap(self.kernels.normal(tuple(shape), mean, std))

    def bernoulli(self, shape, p) -> NDArray:
        """A 0/1 mask with P(1) = p."""
        return self._wrap(self.kernels.bernoulli(tuple(shape), p))

    def rng_state(self) -> dict:
        """The random generator's state (JSON-serialisable), for checkpoints."""
        return self.kernels.rng_state()

    def set_rng_state(self, state: dict):
        """Restore the random generator from :meth:`rng_state`."""
        self.kernels.set_rng_state(state)

    # -- in place: the only way live data changes ------------------------------------------------
    def fill(self, array, value):
        """Set every element of ``array`` to ``value`` (a number or a same-shaped array)."""
        if isinstance(value, NDArray):
            self.kernels.copy_(self._raw(array), self._raw(value))
        else:
            self.kernels.fill_(self._raw(array), value)

    def add_(self, array, other, scale=1.0):
        """array += scale * other, in place (untraced)."""
        self.kernels.add_(self._raw(array), self._raw(other), scale)

    def optimiser_update(self, rule, param, grad, memory=(), *, weight_decay=0.0, **hyperparameters):
        """One untraced, in-place step of ``param`` and its ``memory`` arrays by the update rule registered as
        ``rule`` (sgd, adam, ...: :class:`~sigma_core.compute.updates.UpdateRule`), after adding weight_decay·param
        to ``grad``. Its kernel for this handler if registered, else its reference: chosen on first use and kept."""
        updates = self.kernels.updates
        try:
            update = getattr(updates, rule)  # resolved on first use (Updates.__getattr__), then an attribute
        except AttributeError as error:
            raise SigmaError(str(error)) from None
        raw_param, raw_grad = self._raw(param), self._raw(grad)
        if weight_decay:
            raw_grad = updates.l2_gradient(raw_grad, raw_param, weight_decay)
        update(raw_param, raw_grad, *[self._raw(m) for m in memory], **hyperparameters)

    def all_finite(self, array) -> bool:
        """Whether every element is finite: the trainer's only per-step look at the cost, before the update.

        A device handler may defer it: True now, its updates no-ops once the cost is non-finite, raise at the next read.
        """
        return self.kernels.all_finite(self._raw(array))

    # -- autodiff --------------------------------------------------------------------------
    def tape(self) -> Tape:
        """Record a forward pass: ``with h.tape() as tape: tape.watch(w); ...; tape.gradient(cost, [w])``."""
        return Tape(self)

    def backward(self, records, slots, output, sources, seed=None) -> list:
        """Replay a tape's ``records`` backwards from ``output``: fresh, contiguous gradients of ``sources``
        (zeros where the output does not reach them), summed over every use of a value."""
        k = self.kernels
        grads = [None] * slots
        grads[output._node] = k.full(output.shape, 1.0) if seed is None else self._raw(seed)
        for out_slot, input_slots, raw_inputs, raw_out, vjp, saved in reversed(records):
            g = grads[out_slot]
            if g is None:
                continue
            needs = tuple([s is not None for s in input_slots])
            for i, (slot, grad) in enumerate(zip(input_slots, vjp(k, g, raw_inputs, raw_out, saved, needs))):
                if slot is None or grad is None:
                    continue
                if grad.shape != (x := raw_inputs[i]).shape or grad.dtype != x.dtype:  # named here, not by a later op
                    raise ShapeError(f"op {vjp.__name__!r}: its backward returned a gradient of shape {grad.shape} "
                                     f"{grad.dtype} for input {i}, which is {x.shape} {x.dtype}")
                previous = grads[slot]
                grads[slot] = grad if previous is None else k.add(previous, grad)
        results = []
        for source in sources:
            slot = source._node
            grad = grads[slot] if slot is not None else None
            if grad is None:
                grad = k.full(source.shape, 0.0)
            elif grad is source.data or getattr(grad, "base", None) is not None or grad.shape != source.shape:
                grad = k.broadcast_to(grad, source.shape)  # own, contiguous buffer
            results.append(self._wrap(grad))
        return results

    def no_grad(self):
        """Inference mode: nothing inside is recorded, even if a tape is active."""
        return _NoGrad(self)

    # -- sessions: buffer reuse between iterations ---------------------------------------------------
    # A session is one training iteration: its arrays take recycled buffers (sigma_core.compute.buffers) and expire when
    # the next session begins. Arrays made outside every session belong to no list: they live while held. (A view
    # made between sessions of a session's array, a reshape of the last cost, shares its buffer: keep() it.)
    def begin_session(self):
        """Start an iteration: the previous one's buffers are recycled, its arrays expire unless kept (:meth:`keep`)."""
        _expire(self._ended_arrays)
        if self._session_arrays is not None:  # begun again without an end: the open session ends here
            _expire(self._session_arrays)
        self._ended_arrays, self._session_arrays = (), []
        self.kernels.pool.begin()

    def end_session(self):
        """End an iteration; its arrays stay readable until the next begin_session. Arrays made from now until
        then belong to no session."""
        if self._session_arrays is not None:
            self._ended_arrays, self._session_arrays = self._session_arrays, None
        self.kernels.pool.end()

    @contextlib.contextmanager
    def session(self):
        """``with handler.session():`` one iteration, between :meth:`begin_session` and :meth:`end_session`."""
        self.begin_session()
        try:
            yield
        finally:
            self.end_session()

    def detach_session(self, *arrays) -> None:
        """Take the buffers of the session just ended out of reuse for good, and ``arrays`` made in it out of
        expiry without a copy: a compiled training step owns them from now on, to run the session's kernel calls
        again. The session's other arrays expire now; later sessions allocate afresh."""
        self.kernels.pool.detach()
        for array in arrays:
            array._kept = True
        _expire(self._ended_arrays)
        self._ended_arrays = ()

    @property
    def session_arrays(self) -> int:
        """How many arrays the sessions hold for expiry now (the open or last session's): one iteration's at most."""
        return len(self._session_arrays if self._session_arrays is not None else self._ended_arrays)

    @contextlib.contextmanager
    def record(self, recorder, kernels):
        """Inside: the handler's ops call ``kernels`` (a stand-in for :attr:`kernels` that notes each call) and
        tell ``recorder`` what the calls alone do not show. How a compiled training step (sigmann-replay) records one:

        * ``recorder.check(fn, *args)``: a host-side check of the data (class labels in range), to run on every batch;
        * ``recorder.refuse(reason)``: the step does what a replay would not repeat (keeps an array across steps).
        """
        original = self.kernels
        self.kernels, self.recorder = kernels, recorder
        try:
            yield recorder
        finally:
            self.kernels, self.recorder = original, None

    def keep(self, array) -> NDArray:
        """Move an array made in a session out of buffer reuse (Sigma's limbo)."""
        if self.recorder is not None:
            self.recorder.refuse("it keeps an array across steps")
        if not array._kept:
            array._data = self.kernels.xp.array(array.data, copy=True)
            array._kept = True
        return array

    @property
    def allocations(self) -> int:
        """Fresh buffers allocated inside sessions so far (0 per step after warm-up)."""
        return self.kernels.pool.allocations


def _expire(arrays):
    """Arrays of an ended session lose their buffers (to be recycled), except those kept."""
    for array in arrays:
        if not array._kept:
            array._data = None


class _NoGrad:
    """:meth:`Handler.no_grad`'s context: a class, ~1 µs cheaper than a generator (entered on every step)."""

    def __init__(self, handler):
        self.handler = handler

    def __enter__(self):
        self.tape, self.handler._tape = self.handler._tape, None

    def __exit__(self, *exc_info):
        self.handler._tape = self.tape


class NumpyHandler(Handler):
    """The reference handler, always installed: :class:`~sigma_core.compute.kernels.ArrayKernels` over NumPy unchanged;
    other handlers are checked against it op by op."""

    name = "numpy"


__all__ = ["Handler", "NumpyHandler", "DTYPES"]

"""The handler conformance kit: one test suite every handler distribution runs.

A backend subclasses :class:`HandlerConformance` in a test module of its own and
pytest collects every check below for that handler, in float32 and float64::

    class TestCpuHandler(HandlerConformance):
        handler_factory = NumbaHandler  # any callable (dtype, seed) -> Handler

* every registered op, the core's and the plugins' (``register_ops``: a case
  per entry of its ``Op.examples()``, run as ``handler.op(name, ...)``, see
  :func:`op_cases`), the cases of :data:`CASES` that no one op owns (numbers as
  operands, index arrays, the tape's bookkeeping) and every optimiser rule in
  :data:`UPDATE_CASES` gives
  what the numpy reference handler gives (within :data:`TOLERANCES`) in the
  handler's dtype, gradients included (decay rates near 1 catch a complement
  1 − β rounded in float32);
* every VJP matches central finite differences in float64 (broadcasting,
  reductions, repeated indices, a value used twice, an unused source), and an
  op without a case fails the kit: a new op cannot ship without a gradient
  check (a registered op needs examples);
* dtypes, shape errors, seeded random numbers, in-place updates, sessions
  (no new buffers after warm-up, expired and kept arrays), copies out.

This module imports pytest, so only test code imports it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy
import pytest

from sigma_core import ExpiredArrayError, NumpyHandler, Op, ShapeError, components

DTYPES = ("float32", "float64")

# Agreement with the reference handler. float32: a backend may reorder reductions, fuse
# multiply-adds and use fastmath, so rtol 1e-5 (~80 ulp on these O(1) inputs), and atol 1e-6
# for results that cancel to near zero. float64: 1e-12 (~4500 ulp) allows the same yet
# catches a wrong formula or a silent float32 round trip (off by 1e-8 or more).
TOLERANCES = {
    "float32": {"rtol": 1e-5, "atol": 1e-6},
    "float64": {"rtol": 1e-12, "atol": 1e-12},
}

# Central differences in float64: truncation ~FD_EPS**2 * f''' (~1e-12), round-off ~ulp(f) / FD_EPS
# (~1e-10 here). The numpy handler's worst case uses 7% of the bound; a wrong VJP is off by O(1).
FD_EPS = 1e-6
FD_RTOL = 1e-6
FD_ATOL = 1e-8

SEED = 0


@dataclass(frozen=True)
class OpCase:
    """One op on fixed inputs, compared with the reference and checked by finite differences.

    ``make(rng)`` returns the float64 host arrays that are watched and
    differentiated but for those at the positions ``constants`` (targets, masks:
    passed as handler arrays in their own dtype, never differentiated);
    ``fn(handler, *arrays)`` runs the op named ``op``. A ``random`` case draws from
    the handler's generator, so it is only checked by finite differences, with the
    generator reset before every evaluation.
    """

    id: str
    op: str
    fn: Callable
    make: Callable
    random: bool = False
    constants: tuple[int, ...] = ()

    def inputs(self) -> list:
        """The case's host inputs, the same on every call and for every handler."""
        return [numpy.array(v) if i in self.constants else numpy.array(v, dtype=numpy.float64)
                for i, v in enumerate(self.make(numpy.random.default_rng(SEED)))]


_normal, _grid, _away = Op.normal, Op.grid, Op.away


def _case(id, op, fn, *makers):
    return OpCase(id, op, fn, lambda rng: tuple(m(rng) for m in makers))


_CONDITION = numpy.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])
_REPEATED_ROWS = numpy.array([0, 2, 0, 0])

#: What no one op's examples show: Python numbers as operands (on either side), indices and masks given as handler
#: arrays, and the tape's bookkeeping (contributions from several uses add up; an unused source gets zeros).
CASES: tuple[OpCase, ...] = (
    _case("add-number-left", "add", lambda h, x: h.add(2.5, x), _normal(3, 4)),
    _case("add-number-right", "add", lambda h, x: h.add(x, 2.5), _normal(3, 4)),
    _case("subtract-number-left", "subtract", lambda h, x: h.subtract(1.5, x), _normal(3, 4)),
    _case("subtract-number-right", "subtract", lambda h, x: h.subtract(x, 1.5), _normal(3, 4)),
    _case("multiply-number-left", "multiply", lambda h, x: h.multiply(2.0, x), _normal(3, 4)),
    _case("multiply-number-right", "multiply", lambda h, x: h.multiply(x, -3.0), _normal(3, 4)),
    _case("divide-number-left", "divide", lambda h, x: h.divide(2.0, x), _away(3, 4)),
    _case("divide-number-right", "divide", lambda h, x: h.divide(x, 4.0), _normal(3, 4)),
    _case("power-number-exponent", "power", lambda h, x: h.power(x, 3.0), _normal(3, 4)),
    _case("power-number-base", "power", lambda h, x: h.power(2.0, x), _normal(3, 4)),
    _case("maximum-number", "maximum", lambda h, x: h.maximum(x, 0.3), _grid(3, 4)),
    _case("where-number", "where", lambda h, x: h.where(h.asarray(_CONDITION), x, 0.5), _normal(4)),
    _case("permute", "transpose", lambda h, x: h.permute(x, 2, 0, 1), _normal(2, 3, 4)),
    _case("getitem-repeated-ndarray", "getitem", lambda h, x: h.getitem(x, h.asarray(_REPEATED_ROWS)), _normal(3, 4)),
    _case("getitem-mask", "getitem", lambda h, x: h.getitem(x, h.asarray(_CONDITION)), _normal(3, 4)),
    _case("value-used-twice", "multiply", lambda h, x: h.multiply(x, h.exp(x)), _normal(3, 4)),
    _case("value-used-in-two-branches", "add", lambda h, x, w: h.add(h.matmul(x, w), h.sum(x, axis=1, keepdims=True)),
          _normal(3, 4), _normal(4, 2)),
    _case("unused-source", "exp", lambda h, x, unused: h.exp(x), _normal(3, 4), _normal(2, 2)),
)


def update_cases() -> list[tuple]:
    """A case per example of every registered update rule (kind ``"update_rule"``, :meth:`sigma_core.UpdateRule.
    examples`): ``(id, rule, memory arrays, hyperparameters, stepwise)``, named ``"<rule>-<id>"`` (``"<rule>"`` for
    an empty id)."""
    cases = []
    for component in components("update_rule"):
        rule = component.load()()
        for label, buffers, arguments in rule.examples():
            cases.append(("-".join(filter(None, (component.name, label))), component.name, buffers, arguments,
                          rule.stepwise))
    return cases


def run_update_case(handler, case, steps=3) -> list:
    """Host copies of the parameter and memory after ``steps`` updates by ``case`` (:func:`update_cases`) from
    fixed inputs."""
    _, rule, buffers, arguments, stepwise = case
    rng = numpy.random.default_rng(SEED)
    param = handler.asarray(rng.standard_normal((30, 40)))
    memory = [handler.asarray(numpy.abs(rng.standard_normal((30, 40)))) for _ in range(buffers)]
    for step in range(1, steps + 1):  # several steps: the memory feeds back
        extra = {"step": step} if stepwise else {}
        handler.optimiser_update(rule, param, handler.asarray(rng.standard_normal((30, 40))), memory, **arguments, **extra)
    return [array.to_numpy() for array in (param, *memory)]


def op_cases() -> tuple[OpCase, ...]:
    """A case per example of every registered op, the core's and the plugins' (kind ``"op"``), in op and example
    order. Each ``(id, make, params)`` of ``Op.examples()`` runs as ``handler.op(name, *make(rng), **params)``
    and is named ``"<op>-<id>"``; the op's ``constants`` and ``draws`` carry over."""
    cases = []
    for component in components("op"):
        op = component.load()()
        for example in op.examples():
            assert isinstance(example, tuple) and len(example) == 3, (f"op {component.name!r} "
                f"({component.distribution}): examples() gives (id, make(rng), params) tuples, not {example!r}")
            label, make, params = example
            cases.append(OpCase(f"{component.name}-{label}", component.name, partial(_run_op, component.name, params),
                                make, op.draws, op.constants))
    return tuple(cases)


def _run_op(name, params, handler, *arrays):
    return handler.op(name, *arrays, **params)


# -- helpers -----------------------------------------------------------------------------
def missing_gradient_cases(cases) -> set[str]:
    """Registered ops that no case in ``cases`` exercises."""
    return {component.name for component in components("op")} - {case.op for case in cases}


def _taped_gradients(handler, case, values, weights):
    """The tape's gradients of sum(output * weights) with respect to every input but the case's constants."""
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        watched = [a for i, a in enumerate(arrays) if i not in case.constants]
        tape.watch(*watched)
        out = case.fn(handler, *arrays)
        return tape.gradient(out, watched, seed=handler.asarray(weights))


def _output_weights(shape):
    """Random weights for the output: the VJP is checked with a non-uniform incoming gradient."""
    return numpy.asarray(numpy.random.default_rng(SEED + 1).standard_normal(shape))


def _assert_matches_reference(actual, expected, dtype, what):
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype}, expected the handler's {dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, reference {expected.shape}"
    numpy.testing.assert_allclose(actual.to_numpy(), expected.to_numpy(), **TOLERANCES[dtype], err_msg=what)


SHAPE_ERRORS = (
    ("add", lambda h: h.add(h.zeros((3, 4)), h.zeros((5,))), (3, 4), (5,)),
    ("matmul", lambda h: h.matmul(h.zeros((3, 4)), h.zeros((5, 6))), (3, 4), (5, 6)),
    ("concatenate", lambda h: h.concatenate([h.zeros((3, 4)), h.zeros((3, 5))], axis=0), (3, 4), (3, 5)),
    ("reshape", lambda h: h.reshape(h.zeros((3, 4)), (5,)), (3, 4), (5,)),
)


class HandlerConformance:
    """Base test class: set ``handler_factory(dtype, seed)`` (a class or a function); ``extra_cases`` are checked
    by finite differences only (the reference may not run them). Registered ops need nothing here: their examples
    are cases on every handler."""

    handler_factory: Callable | None = None
    extra_cases: tuple[OpCase, ...] = ()

    # -- plumbing ------------------------------------------------------------------------
    @classmethod
    def make_handler(cls, dtype, seed=SEED):
        if cls.handler_factory is None:
            raise TypeError(f"{cls.__name__}: set handler_factory to a callable (dtype, seed) -> Handler")
        return cls.handler_factory(dtype, seed)

    def pytest_generate_tests(self, metafunc):
        """``case``: every op case; ``reference_case``: the cases the numpy handler can reproduce (the core's
        and the registered ops', which it runs by their portable rule)."""
        registered = op_cases()
        cases = CASES + registered + tuple(self.extra_cases)
        if "case" in metafunc.fixturenames:
            metafunc.parametrize("case", cases, ids=[c.id for c in cases])
        if "reference_case" in metafunc.fixturenames:
            deterministic = [c for c in CASES + registered if not c.random]
            metafunc.parametrize("reference_case", deterministic, ids=[c.id for c in deterministic])
        if "update_case" in metafunc.fixturenames:
            updates = update_cases()
            metafunc.parametrize("update_case", updates, ids=[c[0] for c in updates])

    @pytest.fixture(params=DTYPES)
    def dtype(self, request):
        return request.param

    @pytest.fixture
    def handler(self, dtype):
        return self.make_handler(dtype)

    @pytest.fixture
    def reference(self, dtype):
        return NumpyHandler(dtype, SEED)

    # -- every op against the reference, and every gradient against finite differences -----
    def test_forward_matches_reference(self, handler, reference, reference_case):
        values = reference_case.inputs()
        out = reference_case.fn(handler, *[handler.asarray(v) for v in values])
        expected = reference_case.fn(reference, *[reference.asarray(v) for v in values])
        _assert_matches_reference(out, expected, handler.dtype, reference_case.id)

    def test_gradient_matches_reference(self, handler, reference, reference_case):
        values = reference_case.inputs()
        weights = _output_weights(reference_case.fn(reference, *[reference.asarray(v) for v in values]).shape)
        grads = _taped_gradients(handler, reference_case, values, weights)
        expected = _taped_gradients(reference, reference_case, values, weights)
        for i, (grad, want) in enumerate(zip(grads, expected)):
            _assert_matches_reference(grad, want, handler.dtype, f"{reference_case.id}: gradient of input {i}")

    def test_gradient_matches_finite_differences(self, case):
        handler = self.make_handler("float64")
        state = handler.rng_state()  # reset before every evaluation: random ops draw the same

        def forward(values):
            handler.set_rng_state(state)
            return case.fn(handler, *[handler.asarray(v) for v in values])

        values = case.inputs()
        weights = _output_weights(forward(values).shape)
        handler.set_rng_state(state)
        grads = _taped_gradients(handler, case, values, weights)
        differentiated = [(i, v) for i, v in enumerate(values) if i not in case.constants]
        for (i, value), grad in zip(differentiated, grads):
            assert (grad.shape, grad.dtype) == (value.shape, "float64"), f"{case.id}: gradient of input {i} is {grad!r}"
            numeric = numpy.zeros_like(value)
            for j in numpy.ndindex(value.shape):
                original = value[j]
                value[j] = original + FD_EPS
                up = numpy.sum(forward(values).to_numpy() * weights)
                value[j] = original - FD_EPS
                down = numpy.sum(forward(values).to_numpy() * weights)
                value[j] = original
                numeric[j] = (up - down) / (2 * FD_EPS)
            numpy.testing.assert_allclose(grad.to_numpy(), numeric, rtol=FD_RTOL, atol=FD_ATOL,
                                          err_msg=f"{case.id}: gradient of input {i}")

    def test_optimiser_update_matches_reference(self, handler, reference, update_case):
        ours, expected = run_update_case(handler, update_case), run_update_case(reference, update_case)
        for name, a, b in zip(("parameter", "memory 1", "memory 2"), ours, expected):
            assert a.dtype == handler.dtype, f"{update_case[0]}: {name} has dtype {a.dtype}"
            numpy.testing.assert_allclose(a, b, **TOLERANCES[handler.dtype], err_msg=f"{update_case[0]}: {name}")

    def test_every_differentiable_op_has_a_gradient_case(self):
        missing = missing_gradient_cases(CASES + op_cases() + tuple(self.extra_cases))
        assert not missing, f"registered ops without a finite-difference case (give them examples()): {sorted(missing)}"

    # -- dtypes -------------------------------------------------------------------------------
    def test_asarray_casts_float_data_to_the_handler_dtype(self, handler):
        assert handler.asarray(numpy.ones((2, 3), dtype=numpy.float64)).dtype == handler.dtype
        assert handler.asarray(numpy.ones((2, 3), dtype=numpy.float32)).dtype == handler.dtype
        assert handler.asarray([[0.5, 1.5]]).dtype == handler.dtype

    def test_asarray_keeps_integer_and_boolean_data(self, handler):
        assert numpy.dtype(handler.asarray(numpy.array([1, 2, 3])).dtype).kind in "iu"
        assert handler.asarray(numpy.array([True, False])).dtype == "bool"

    def test_creation_matches_reference(self, handler, reference):
        for make in (lambda h: h.zeros((2, 3)), lambda h: h.ones(4), lambda h: h.full((3, 1), -2.5),
                     lambda h: h.number(0.25)):
            _assert_matches_reference(make(handler), make(reference), handler.dtype, "creation")
        assert handler.number(0.25).value == 0.25

    def test_argmax_gives_integers_matching_reference(self, handler, reference):
        values = _grid(3, 4)(numpy.random.default_rng(SEED))
        for axis in (None, 0, 1, -1):
            out = handler.argmax(handler.asarray(values), axis=axis)
            assert numpy.dtype(out.dtype).kind in "iu", f"argmax(axis={axis}) has dtype {out.dtype}"
            numpy.testing.assert_array_equal(out.to_numpy(), numpy.argmax(values, axis=axis))

    def test_comparisons_give_masks_matching_reference(self, handler):
        x = numpy.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]])
        y = numpy.array([0.0, 2.0, 0.5])  # equal in some places, broadcast over rows
        for op in ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal"):
            for a, b in ((x, y), (x, 0.5)):
                second = b if isinstance(b, float) else handler.asarray(b)
                mask = getattr(handler, op)(handler.asarray(a), second)
                assert mask.dtype == "bool", f"{op} gives dtype {mask.dtype}"
                numpy.testing.assert_array_equal(mask.to_numpy(), getattr(numpy, op)(a, b), err_msg=op)

    # -- shape errors --------------------------------------------------------------------------
    @pytest.mark.parametrize("op, run, first, second", SHAPE_ERRORS, ids=[e[0] for e in SHAPE_ERRORS])
    def test_shape_error_names_the_op_and_both_shapes(self, handler, op, run, first, second):
        with pytest.raises(ShapeError) as error:
            run(handler)
        message = str(error.value)
        for part in (op, str(first), str(second)):
            assert part in message, f"{op}: {part!r} missing from the error message {message!r}"

    @pytest.mark.parametrize("labels", [[0, -1], [0, 3]], ids=["negative", "too-large"])
    def test_cross_entropy_rejects_labels_outside_the_classes(self, handler, labels):
        logits = handler.zeros((2, 3))
        with pytest.raises(ShapeError, match=rf"class label {labels[1]} is outside 0..2"):
            handler.softmax_cross_entropy(logits, handler.asarray(numpy.array(labels)))

    def test_reduction_over_a_missing_axis_raises(self, handler):
        with pytest.raises(ShapeError):
            handler.sum(handler.zeros((3, 4)), axis=2)

    # -- random numbers --------------------------------------------------------------------------
    @staticmethod
    def _draws(handler):
        return [handler.uniform((50,), -1.0, 2.0).to_numpy(), handler.normal((50,), 1.0, 0.5).to_numpy(),
                handler.bernoulli((50,), 0.4).to_numpy()]

    def test_same_seed_gives_same_values(self, dtype):
        for a, b in zip(self._draws(self.make_handler(dtype, 7)), self._draws(self.make_handler(dtype, 7))):
            numpy.testing.assert_array_equal(a, b)

    def test_different_seeds_give_different_values(self, dtype):
        for a, b in zip(self._draws(self.make_handler(dtype, 7)), self._draws(self.make_handler(dtype, 8))):
            assert not numpy.array_equal(a, b)

    def test_random_values_have_the_right_dtype_and_distribution(self, handler):
        uniform = handler.uniform((20000,), -1.0, 2.0)
        normal = handler.normal((20000,), 1.0, 0.5)
        mask = handler.bernoulli((20000,), 0.3)
        for array in (uniform, normal, mask):
            assert array.dtype == handler.dtype
        u, n, m = uniform.to_numpy(), normal.to_numpy(), mask.to_numpy()
        # 20000 draws: standard errors ~0.006 (uniform mean), ~0.004 (normal mean, std),
        # ~0.003 (bernoulli mean); the bounds below are > 5 of them.
        assert u.min() >= -1.0 and u.max() < 2.0 and abs(u.mean() - 0.5) < 0.04
        assert abs(n.mean() - 1.0) < 0.03 and abs(n.std() - 0.5) < 0.03
        assert set(numpy.unique(m)) <= {0.0, 1.0} and abs(m.mean() - 0.3) < 0.02

    def test_rng_state_round_trip_reproduces_values(self, handler):
        handler.normal((5,))
        state = handler.rng_state()
        first = self._draws(handler)
        handler.set_rng_state(state)
        again = self._draws(handler)
        handler.set_rng_state(json.loads(json.dumps(state)))  # checkpoints store it as JSON
        from_json = self._draws(handler)
        for a, b, c in zip(first, again, from_json):
            numpy.testing.assert_array_equal(a, b)
            numpy.testing.assert_array_equal(a, c)

    def test_dropout_gradient_follows_the_mask_implied_by_its_output(self, handler):
        p = 0.25
        x = _away(40, 50)(numpy.random.default_rng(SEED))  # nonzero, so y / x recovers the mask
        with handler.tape() as tape:
            array = handler.asarray(x)
            tape.watch(array)
            out = handler.dropout(array, p)
            (grad,) = tape.gradient(out, [array])
        mask = out.to_numpy() / x.astype(handler.dtype)
        kept = mask != 0
        numpy.testing.assert_allclose(mask[kept], 1.0 / (1.0 - p), **TOLERANCES[handler.dtype])
        assert abs(kept.mean() - (1.0 - p)) < 0.05  # 2000 draws: standard error ~0.01
        numpy.testing.assert_allclose(grad.to_numpy(), mask, **TOLERANCES[handler.dtype])

    # -- in place --------------------------------------------------------------------------------
    def test_fill_and_add_update_in_place(self, handler):
        array = handler.zeros((2, 3))
        handler.fill(array, 1.5)
        numpy.testing.assert_array_equal(array.to_numpy(), numpy.full((2, 3), 1.5))
        handler.fill(array, handler.asarray(numpy.arange(6.0).reshape(2, 3)))
        handler.add_(array, handler.ones((2, 3)), scale=-0.5)
        numpy.testing.assert_allclose(array.to_numpy(), numpy.arange(6.0).reshape(2, 3) - 0.5)
        handler.add_(array, handler.ones((2, 3)))
        numpy.testing.assert_allclose(array.to_numpy(), numpy.arange(6.0).reshape(2, 3) + 0.5)
        assert array.dtype == handler.dtype

    def test_all_finite(self, handler):
        assert handler.all_finite(handler.ones((3,)))
        assert not handler.all_finite(handler.asarray([1.0, numpy.nan]))
        assert not handler.all_finite(handler.asarray([numpy.inf, 1.0]))

    # -- sessions --------------------------------------------------------------------------------
    @staticmethod
    def _training_setup(handler):
        """Parameters and a batch made outside any session, as a trainer makes them."""
        rng = numpy.random.default_rng(SEED)
        weights = handler.asarray(rng.standard_normal((4, 3)) * 0.5)
        bias = handler.zeros((3,))
        x = handler.asarray(rng.standard_normal((8, 4)))
        targets = handler.asarray(rng.integers(0, 3, size=8))
        return weights, bias, x, targets

    @staticmethod
    def _training_step(handler, weights, bias, x, targets):
        """dense -> softmax cross-entropy under a tape, then an in-place SGD update."""
        with handler.tape() as tape:
            tape.watch(weights, bias)
            cost = handler.softmax_cross_entropy(handler.dense(x, weights, bias, "tanh"), targets)
            grad_w, grad_b = tape.gradient(cost, [weights, bias])
        handler.add_(weights, grad_w, scale=-0.1)
        handler.add_(bias, grad_b, scale=-0.1)
        return cost.value

    def test_steps_after_warm_up_allocate_no_buffers(self, handler):
        params = self._training_setup(handler)
        with handler.session():
            self._training_step(handler, *params)
        warm = handler.allocations
        for _ in range(3):
            with handler.session():
                self._training_step(handler, *params)
        assert handler.allocations == warm, f"{handler.allocations - warm} new buffers after the warm-up step"

    def test_sessions_do_not_change_results(self, dtype):
        """Recycled buffers must never alias live data: the same steps give the same costs."""
        plain, pooled = self.make_handler(dtype), self.make_handler(dtype)
        plain_params, pooled_params = self._training_setup(plain), self._training_setup(pooled)
        for _ in range(3):
            expected = self._training_step(plain, *plain_params)
            with pooled.session():
                assert self._training_step(pooled, *pooled_params) == expected
        for a, b in zip(plain_params[:2], pooled_params[:2]):
            numpy.testing.assert_array_equal(a.to_numpy(), b.to_numpy())

    def test_arrays_expire_with_their_session_unless_kept(self, handler):
        x = handler.asarray(numpy.arange(6.0))
        handler.begin_session()
        temporary = handler.add(x, 1.0)
        kept = handler.keep(handler.multiply(x, 2.0))
        handler.end_session()
        numpy.testing.assert_array_equal(temporary.to_numpy(), numpy.arange(6.0) + 1.0)  # readable until the next session
        handler.begin_session()
        handler.multiply(x, -7.0)  # likely reuses the recycled buffers
        with pytest.raises(ExpiredArrayError):
            temporary.to_numpy()
        with pytest.raises(ExpiredArrayError):
            handler.add(temporary, 1.0)
        numpy.testing.assert_array_equal(handler.add(kept, 0.0).to_numpy(), numpy.arange(6.0) * 2.0)
        handler.end_session()
        numpy.testing.assert_array_equal(x.to_numpy(), numpy.arange(6.0))  # made outside sessions: never recycled

    # -- copies in and out -----------------------------------------------------------------------
    def test_to_numpy_returns_a_copy(self, handler):
        array = handler.asarray([1.0, 2.0, 3.0])
        host = array.to_numpy()
        host[0] = 99.0
        numpy.testing.assert_array_equal(array.to_numpy(), [1.0, 2.0, 3.0])

    def test_asarray_copies_host_data(self, handler):
        host = numpy.array([1.0, 2.0, 3.0], dtype=handler.dtype)
        array = handler.asarray(host)
        host[0] = 99.0
        numpy.testing.assert_array_equal(array.to_numpy(), [1.0, 2.0, 3.0])

"""What each check finds, and what it lets through: one array at a time, then a VJP that breaks the shape rule."""

import numpy
import pytest

from sigma_core import NumpyHandler, ShapeError, create_handler

from sigmann_debug.checks import BadValue, Checks

K = NumpyHandler("float32").kernels


def problem(checks, values, shape=None, dtype="float32"):
    found = checks.problem(K, numpy.asarray(values, dtype=dtype), shape)
    return found and (found[0], found[1])


def test_nan_and_inf_are_found_at_their_first_element_each_as_configured():
    values = [[1.0, numpy.inf], [numpy.nan, 2.0]]
    assert problem(Checks(), values) == (BadValue, "inf at index [0, 1]")
    assert problem(Checks(inf=False), values) == (BadValue, "nan at index [1, 0]")
    assert problem(Checks(nan=False), values) == (BadValue, "inf at index [0, 1]")
    assert problem(Checks(nan=False, inf=False), values) is None


def test_finite_values_whose_sum_overflows_are_no_problem():
    with numpy.errstate(over="ignore"):  # as sigma train runs: the overflow is the point
        assert problem(Checks(), [3e38, 3e38]) is None  # the float32 sum is inf; no element is


def test_a_value_above_the_limit_is_named_and_one_at_it_is_not():
    assert problem(Checks(limit=10.0), [1.0, -10.5, 11.0]) == (BadValue, "-10.5 at index [1], above the limit 10")
    assert problem(Checks(limit=10.0), [10.0, -10.0]) is None


def test_shapes_and_dtypes_are_held_to_what_is_declared_unless_turned_off():
    assert problem(Checks(), [1.0, 2.0], shape=(2, 1)) == (
        ShapeError, "a float32 array of shape (2,), not float32 of shape (2, 1)")
    assert problem(Checks(), [1.0], dtype="float64")[0] is ShapeError
    assert problem(Checks(shapes=False), [1.0], shape=(3,), dtype="float64") is None
    assert problem(Checks(limit=1.0), [3, 7], dtype="int64") is None  # labels: not checked


def test_a_vjp_returning_another_shape_than_its_input_is_a_shape_error_naming_the_op(planted):
    handler = create_handler("debug:numpy")
    x = handler.asarray(numpy.ones((2, 3)))
    with handler.tape() as tape:
        tape.watch(x)
        out = handler.op("planted_vjp", x, fn="wide")
        with pytest.raises(ShapeError, match=r"^debug: op 'planted_vjp' outside every layer, backward \(the gradient "
                                             r"of input 0\), outside training: a float32 array of shape \(2, 3, 1\), "
                                             r"not float32 of shape \(2, 3\)$"):
            tape.gradient(out, [x], seed=handler.ones((2, 3)))

"""Tape semantics the conformance kit (sigmann-testing) takes for granted.

The kit checks gradient *values*; these tests pin down the core tape's rules:
what is recorded, when the tape is released, and which mistakes raise.
"""

import numpy
import pytest

from sigma_core import NumpyHandler
from sigma_core.errors import SigmaError


@pytest.fixture
def h():
    return NumpyHandler("float64", seed=0)


@pytest.fixture
def w(h):
    return h.asarray(numpy.arange(6.0).reshape(2, 3))


def test_no_grad_records_nothing(h, w):
    with h.tape() as tape:
        tape.watch(w)
        with h.no_grad():
            y = h.sum(h.multiply(w, 2.0))
        assert y._node is None
        with pytest.raises(SigmaError, match="not computed from any watched array"):
            tape.gradient(y, [w])


def test_recording_resumes_after_no_grad(h, w):
    with h.tape() as tape:
        tape.watch(w)
        with h.no_grad():
            h.exp(w)
        (grad,) = tape.gradient(h.sum(h.multiply(w, 3.0)), [w])
    numpy.testing.assert_array_equal(grad.to_numpy(), numpy.full((2, 3), 3.0))


def test_nested_tape_raises_and_leaves_the_outer_tape_working(h, w):
    with h.tape() as tape:
        tape.watch(w)
        with pytest.raises(SigmaError, match="nested tapes"):
            with h.tape():
                pass
        (grad,) = tape.gradient(h.sum(w), [w])
    numpy.testing.assert_array_equal(grad.to_numpy(), numpy.ones((2, 3)))


def test_tape_is_released_after_gradient(h, w):
    with h.tape() as tape:
        tape.watch(w)
        hidden = h.tanh(w)
        cost = h.sum(hidden)
        tape.gradient(cost, [w])
        assert w._node is None and hidden._node is None and cost._node is None
        with pytest.raises(SigmaError):  # a tape is replayed once
            tape.gradient(cost, [w])


def test_tape_is_released_when_the_block_exits_without_gradient(h, w):
    with pytest.raises(RuntimeError):
        with h.tape() as tape:
            tape.watch(w)
            hidden = h.exp(w)
            raise RuntimeError("forward pass failed")
    assert w._node is None and hidden._node is None
    assert h.exp(w)._node is None  # nothing is recorded any more


def test_gradient_with_respect_to_an_unwatched_array_is_zeros(h, w):
    other = h.ones((4,))
    with h.tape() as tape:
        tape.watch(w)
        cost = h.sum(h.multiply(w, h.sum(other)))
        grad_w, grad_other = tape.gradient(cost, [w, other])
    numpy.testing.assert_array_equal(grad_w.to_numpy(), numpy.full((2, 3), 4.0))
    assert grad_other.shape == (4,) and grad_other.dtype == "float64"
    numpy.testing.assert_array_equal(grad_other.to_numpy(), numpy.zeros(4))


def test_gradient_never_aliases_a_parameter(h, w):
    """An optimiser updates parameters in place with the gradient: they must not share a buffer."""
    with h.tape() as tape:
        tape.watch(w)
        (grad,) = tape.gradient(h.reshape(w, (6,)), [w], seed=h.ones((6,)))
    h.add_(grad, grad)
    numpy.testing.assert_array_equal(w.to_numpy(), numpy.arange(6.0).reshape(2, 3))


def test_op_on_arrays_of_two_handlers_raises_a_clear_error(h, w):
    other = NumpyHandler("float32", seed=0)
    foreign = other.ones((2, 3))
    with pytest.raises(SigmaError, match=r"handler\.asarray\(array\.to_numpy\(\)\)") as error:
        h.add(w, foreign)
    assert "float32" in str(error.value) and "float64" in str(error.value)  # names both handlers
    with pytest.raises(SigmaError):
        w + foreign  # operators go through the first array's handler


def test_raw_numpy_operand_raises_a_clear_error(h, w):
    with pytest.raises(TypeError, match="handler.asarray"):
        h.add(w, numpy.ones((2, 3)))

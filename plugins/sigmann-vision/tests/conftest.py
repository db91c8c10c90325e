"""What the vision tests share: handlers to run on, comparisons within a dtype's precision, and taped gradients."""

from __future__ import annotations

import importlib.util
import math

import numpy
import pytest

#: The handlers every op and layer is checked on: the reference and the numba one (skipped without numba).
HANDLERS = ["numpy", pytest.param("cpu", marks=pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                                                  reason="the cpu handler needs numba"))]


@pytest.fixture(params=HANDLERS)
def handler_name(request):
    """Each handler the test runs on."""
    return request.param


@pytest.fixture
def close():
    return _close


@pytest.fixture
def taped():
    return _taped


def _close(actual, expected, dtype, depth, what=""):
    """Two computations of the same values in different orders, ``depth`` roundings deep (the terms of the widest
    sum): each rounding is off by at most eps relative to the largest value involved, and independent roundings
    add up like a random walk, to about √depth of them; a wrong formula is off by far more."""
    bound = float(numpy.finfo(dtype).eps) * math.sqrt(depth) * 4
    scale = max(float(numpy.abs(expected).max(initial=0.0)), 1.0)
    numpy.testing.assert_allclose(actual, expected, rtol=bound, atol=bound * scale, err_msg=what)


def _taped(handler, name, values, seed, **params):
    """``handler.op(name, *values, **params)`` and the gradients of sum(output · seed) for every input, as NumPy."""
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        tape.watch(*arrays)
        out = handler.op(name, *arrays, **params)
        grads = tape.gradient(out, arrays, seed=handler.asarray(seed(out.shape) if callable(seed) else seed))
    return out.to_numpy(), [g.to_numpy() for g in grads]

"""What the recurrent tests share: comparisons within the dtype's precision and the depth of a computation."""

from __future__ import annotations

import math

import numpy
import pytest


@pytest.fixture
def assert_close():
    """``assert_close(actual, expected, dtype, depth, what="")`` for two computations of the same values in
    different orders, ``depth`` roundings deep (the time steps times the terms of the widest sum in each).

    Each rounding is off by at most the dtype's epsilon relative to the values involved (the largest of
    ``expected``: an element that cancels to near zero keeps its terms' error), and independent roundings add
    up like a random walk, to about √depth of them; a wrong formula is off by far more.
    """

    def assert_close(actual, expected, dtype, depth, what=""):
        bound = float(numpy.finfo(dtype).eps) * math.sqrt(depth)
        scale = max(float(numpy.abs(expected).max(initial=0.0)), 1.0)
        numpy.testing.assert_allclose(actual, expected, rtol=bound, atol=bound * scale, err_msg=what)

    return assert_close

"""The NumPy reference handler passes the conformance kit (in float32 and float64).

The kit compares handlers with NumPy, so for this handler the reference
comparisons are trivially exact; what it really checks here is every gradient
against finite differences and the dtype, random, session and copy contracts.
"""

from sigma_core.handlers.numpy_handler import NumpyHandler
from sigma_core.testing import CASES, HandlerConformance, missing_gradient_cases


class TestNumpyHandler(HandlerConformance):
    handler_factory = NumpyHandler


class CubingHandler(NumpyHandler):
    """A handler with one extra differentiable op and no gradient case for it."""

    def cube(self, a):
        return self._apply(lambda x: x**3, None, (a,))


def test_coverage_check_flags_an_op_without_a_gradient_case():
    assert missing_gradient_cases(NumpyHandler, CASES) == set()
    assert missing_gradient_cases(CubingHandler, CASES) == {"cube"}

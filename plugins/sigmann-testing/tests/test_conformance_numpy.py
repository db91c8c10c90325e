"""The numpy reference handler passes the conformance kit (in float32 and float64), and the kit's coverage rule.

The kit compares handlers with NumPy, so for this handler the reference
comparisons are trivially exact; what it really checks here is every gradient
against finite differences (the core's ops and every registered op installed)
and the dtype, random, session and copy contracts.
"""

import sys

import pytest

from sigma_core import NumpyHandler
from sigmann_testing import CASES, HandlerConformance, missing_gradient_cases, op_cases


class TestNumpyHandler(HandlerConformance):
    handler_factory = NumpyHandler


OPS_PLUGIN = '''
from sigma_core import Op, hookimpl


class Cube(Op):
    """x**3, with one example."""

    def forward(self, k, x, scale=1.0):
        return scale * x**3, None

    def backward(self, k, g, inputs, out, saved, needs, scale=1.0):
        return (3 * scale * inputs[0] ** 2 * g,)

    def examples(self):
        return [("scaled", lambda rng: [rng.standard_normal((3, 4))], {"scale": 0.5})]


class Square(Op):
    """x**2, without examples."""

    def forward(self, k, x):
        return x * x, None

    def backward(self, k, g, inputs, out, saved, needs):
        return (2 * inputs[0] * g,)


@hookimpl
def register_ops(register):
    register("kit_cube", Cube)
    register("kit_square", Square)
'''


@pytest.fixture
def ops_plugin(install_ops):
    """An installed distribution registering the ops kit_cube (one example) and kit_square (none)."""
    install_ops(OPS_PLUGIN)


def test_coverage_check_flags_registered_ops_without_a_gradient_case(ops_plugin):
    assert missing_gradient_cases(CASES + op_cases()) == {"kit_square"}  # the core's ops: their own examples
    assert {"kit_cube", "kit_square", "dense", "sqrt"} <= missing_gradient_cases(CASES)


def test_registered_ops_are_cases_and_one_without_examples_fails_the_kit(ops_plugin):
    (case,) = [case for case in op_cases() if case.op.startswith("kit_")]
    assert (case.id, case.op) == ("kit_cube-scaled", "kit_cube")
    kit = TestNumpyHandler()
    kit.test_gradient_matches_finite_differences(case)
    kit.test_gradient_matches_reference(NumpyHandler("float32", 0), NumpyHandler("float32", 0), case)
    with pytest.raises(AssertionError, match=r"give them examples\(\).*\['kit_square'\]"):
        kit.test_every_differentiable_op_has_a_gradient_case()


def test_a_wrong_vjp_of_a_registered_op_fails_the_finite_differences(ops_plugin, monkeypatch):
    (case,) = [case for case in op_cases() if case.op.startswith("kit_")]
    cube = sys.modules["kit_ops_mod"].Cube
    monkeypatch.setattr(cube, "backward", lambda self, k, g, inputs, out, saved, needs, scale=1.0: (inputs[0] * g,))
    with pytest.raises(AssertionError, match="kit_cube-scaled: gradient of input 0"):
        TestNumpyHandler().test_gradient_matches_finite_differences(case)

"""``check_op``: an op that keeps the contract passes on every installed handler; each way of breaking it fails,
naming the op, the handler and the example."""

from __future__ import annotations

import pytest

from sigmann_testing import check_op

SCALE_PLUGIN = '''
import numpy

from sigma_core import Op, hookimpl


class Scale(Op):
    """x · s (s per column), keeping the buffer rule."""

    def forward(self, k, x, s):
        out = k.empty(x.shape)
        k.xp.multiply(x, s, out=out)
        return out, None

    def backward(self, k, g, inputs, out, saved, needs):
        x, s = inputs
        dx = k.multiply(g, s) if needs[0] else None
        ds = k.sum(k.multiply(g, x), axis=0) if needs[1] else None
        return dx, ds

    def examples(self):
        return [("columns", lambda rng: [rng.standard_normal((3, 4)), rng.standard_normal(4)], {})]


class Count(Op):
    """x, counting its calls in its second input, a layer's state (as batch_norm moves its statistics)."""

    def forward(self, k, x, calls):
        k.xp.add(calls, 1.0, out=calls)
        return k.copy(x), None

    def backward(self, k, g, inputs, out, saved, needs):
        return k.copy(g), k.full(inputs[1].shape, 0.0)

    def examples(self):
        return [("once", lambda rng: [rng.standard_normal(3), numpy.zeros(1)], {})]


class Bare(Op):
    """An op without examples."""

    def forward(self, k, x):
        return k.copy(x), None


@hookimpl
def register_ops(register):
    register("kit_scale", Scale)
    register("kit_count", Count)
    register("kit_bare", Bare)
'''


@pytest.fixture
def scale(install_ops):
    return install_ops(SCALE_PLUGIN).Scale


def test_an_op_that_keeps_the_contract_passes_on_every_installed_handler(scale, sigma_handlers):
    assert check_op("kit_scale") == sigma_handlers and "numpy" in sigma_handlers


def forward_fresh(self, k, x, s):
    return x * s, None  # a new array, not a buffer from k.empty


def forward_writes_its_input(self, k, x, s):
    k.xp.multiply(x, s, out=x)
    return k.copy(x), None


def backward_writes_g(self, k, g, inputs, out, saved, needs):
    k.xp.multiply(g, inputs[1], out=g)
    return g, k.sum(k.multiply(g, inputs[0]), axis=0)


def backward_wrong(self, k, g, inputs, out, saved, needs):
    return k.multiply(g, inputs[1]), k.sum(g, axis=0)


BROKEN = [
    ("forward", forward_fresh, "columns: forward returns or saves its output (3, 4) that is not in a buffer from "
                               "k.empty/k.full"),
    ("forward", forward_writes_its_input, "columns: forward writes input 0"),
    ("backward", backward_writes_g, "columns: backward writes the incoming gradient g"),
    ("backward", backward_wrong, "kit_scale-columns: gradient of input 1"),
]


@pytest.mark.parametrize("method, broken, message", BROKEN, ids=[b[1].__name__ for b in BROKEN])
def test_each_broken_rule_fails_naming_the_op_the_handler_and_the_example(scale, monkeypatch, method, broken, message):
    monkeypatch.setattr(scale, method, broken)
    with pytest.raises(AssertionError, match="^op 'kit_scale' on handler 'numpy': ") as failure:
        check_op("kit_scale", handlers=["numpy"])
    assert message in str(failure.value)


def test_an_op_may_move_the_inputs_it_is_told_are_state(scale):
    with pytest.raises(AssertionError, match="^op 'kit_count' on handler 'numpy': once: forward writes input 1"):
        check_op("kit_count", handlers=["numpy"])
    assert check_op("kit_count", handlers=["numpy"], state_inputs=(1,)) == ["numpy"]


def test_an_op_without_examples_or_not_registered_fails(scale):
    with pytest.raises(AssertionError, match=r"op 'kit_bare': examples\(\) gives no cases"):
        check_op("kit_bare")
    with pytest.raises(AssertionError, match=r"no op 'kit_nothing' is registered \(registered: .*kit_bare, kit_count, "
                                             r"kit_scale"):
        check_op("kit_nothing")

"""Optimisers: updates against NumPy references, freezing, checkpoints, buffer reuse."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import NumpyHandler, build
from sigma_core.errors import ConfigError, ShapeError, SigmaError, UnknownComponentError
from sigma_core.training.optimisers import Adam, GradientDescent
from sigmann_testing import OptimiserChecks


def make_handler(dtype="float64", seed=0):
    return NumpyHandler(dtype, seed)


# -- hand-written NumPy references: (param, grads) -> param after each grad ---------------------


def ref_sgd(p, grads, lr):
    for g in grads:
        p = p - lr * g
    return p


def ref_adam(p, grads, lr, b1, b2, eps):
    m, v = numpy.zeros_like(p), numpy.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        p = p - lr * m_hat / (numpy.sqrt(v_hat) + eps)
    return p


class TestCoreOptimisers(OptimiserChecks):
    """The kit's checks (sigmann_testing.optimisers) of the core's own optimisers; sigmann-optimisers checks its."""

    cases = {
        "sgd": (lambda: GradientDescent(0.1), lambda p, gs: ref_sgd(p, gs, 0.1), 0.1),
        "adam": (lambda: Adam(0.05), lambda p, gs: ref_adam(p, gs, 0.05, 0.9, 0.999, 1e-8), 0.05),
    }


def test_freeze_filters_from_the_constructor_and_unfreeze():
    optimiser = GradientDescent(freeze=["*.biases"])
    ids = ["1-dense.weights", "1-dense.biases"]
    assert optimiser.trainable(ids) == ["1-dense.weights"]
    optimiser.freeze("1-dense.*")
    assert optimiser.trainable(ids) == []
    optimiser.unfreeze("1-dense.*")
    assert optimiser.filters == ("*.biases",)
    optimiser.clear_filters()
    assert optimiser.trainable(ids) == ids
    with pytest.raises(SigmaError, match=r"no freeze pattern '\*\.weights'"):
        optimiser.unfreeze("*.weights")


def test_loading_another_optimisers_state_is_an_error():
    with pytest.raises(SigmaError, match="Adam.*'GradientDescent'"):
        Adam().load_state_dict(GradientDescent().state_dict(), make_handler())


def test_published_updates_are_the_applied_differences():
    h = make_handler()
    param = h.asarray([1.0, 2.0])
    optimiser = GradientDescent(0.5)
    optimiser.publish_updates = True
    optimiser.step(h, {"w": param}, {"w": h.asarray([2.0, -4.0])})
    numpy.testing.assert_allclose(optimiser.published["updates"]["w"].to_numpy(), [-1.0, 2.0])
    assert optimiser.published["learning_rate"] == 0.5 and optimiser.published["step"] == 1
    optimiser.publish_updates = False
    optimiser.step(h, {"w": param}, {"w": h.asarray([0.0, 0.0])})
    assert "updates" not in optimiser.published


def test_learning_rate_changes_between_steps():
    h = make_handler()
    param = h.asarray([1.0])
    optimiser = GradientDescent(0.1)
    optimiser.step(h, {"w": param}, {"w": h.asarray([1.0])})  # p = 0.9
    optimiser.learning_rate = 0.0
    optimiser.step(h, {"w": param}, {"w": h.asarray([1.0])})
    numpy.testing.assert_allclose(param.to_numpy(), [0.9])


def test_weight_decay_adds_l2_to_the_gradient():
    h = make_handler()
    param = h.asarray([2.0])
    GradientDescent(0.1, weight_decay=0.5).step(h, {"w": param}, {"w": h.asarray([1.0])})
    numpy.testing.assert_allclose(param.to_numpy(), [2.0 - 0.1 * (1.0 + 0.5 * 2.0)])


def test_missing_or_misshapen_gradients_name_the_parameter():
    h = make_handler()
    params = {"1-dense.weights": h.zeros((2, 2))}
    with pytest.raises(SigmaError, match="no gradient for parameter.*1-dense.weights"):
        Adam().step(h, params, {})
    with pytest.raises(ShapeError, match="1-dense.weights.*\\(3,\\)"):
        Adam().step(h, params, {"1-dense.weights": h.zeros(3)})


def test_an_optimiser_is_built_from_its_table():
    optimiser = build("optimiser", {"type": "adam", "learning_rate": 0.02, "freeze": ["*.biases"]})
    assert isinstance(optimiser, Adam)
    assert optimiser.learning_rate == 0.02 and optimiser.filters == ("*.biases",)
    assert isinstance(build("optimiser", {"type": "gradient_descent"}), GradientDescent)
    with pytest.raises(ConfigError, match="unknown key.*lerning_rate"):
        build("optimiser", {"type": "adam", "lerning_rate": 0.1})
    with pytest.raises(ConfigError, match="'type'"):
        build("optimiser", {"learning_rate": 0.1})
    with pytest.raises(UnknownComponentError, match="adamx"):
        build("optimiser", {"type": "adamx"})


def test_hyperparameters_and_repr():
    adam = Adam(0.01, beta2=0.99)
    assert adam.hyperparameters() == {
        "learning_rate": 0.01, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.0,
    }
    assert repr(adam).startswith("Adam(learning_rate=0.01")


def test_an_optimiser_without_a_handler_rule_updates_through_handler_ops():
    """A plugin optimiser overrides update(); the built-ins' rules are handler ops a backend compiles."""
    from sigma_core.training.optimisers import Optimiser

    class SignDescent(Optimiser):
        def update(self, handler, param, grad, memory, step):
            handler.add_(param, handler.sign(grad), scale=-self.learning_rate / step)

    h = make_handler()
    param = h.asarray([1.0, 2.0])
    optimiser = SignDescent(0.5)
    optimiser.step(h, {"w": param}, {"w": h.asarray([3.0, -1.0])})
    optimiser.step(h, {"w": param}, {"w": h.asarray([3.0, -1.0])})
    numpy.testing.assert_allclose(param.to_numpy(), [1.0 - 0.5 - 0.25, 2.0 + 0.5 + 0.25])
    with pytest.raises(SigmaError, match="handler 'numpy': unknown update_rule 'lion' \\(available: .*adam.*sgd"):
        h.optimiser_update("lion", param, h.zeros(2))


def test_an_update_rule_s_kernel_is_chosen_for_its_handler_and_one_that_cannot_load_names_it(fake_site):
    """A rule registered with a kernel for ``numpy`` runs that kernel there (resolved once, then kept); a kernel
    that cannot be imported is an error naming the rule, the handler and the distribution, not the reference."""
    fake_site.add("sigmann-halving", entry_points={"halving": "halving_rule"}, modules={"halving_rule": """
        from sigma_core import UpdateRule, hookimpl

        class Halving(UpdateRule):
            def apply(self, k, param, grad, *, lr):
                k.xp.subtract(param, k.xp.multiply(grad, lr), out=param)

        class HalvingTwice(Halving):
            def apply(self, k, param, grad, *, lr):
                super().apply(k, param, grad, lr=2 * lr)

        @hookimpl
        def register_update_rules(register):
            register("halving", Halving, kernels={"numpy": HalvingTwice})
            register("broken", Halving, kernels={"numpy": "halving_rule:Missing"})
    """})
    h = make_handler()
    param = h.asarray([1.0, 2.0])
    h.optimiser_update("halving", param, h.asarray([1.0, 1.0]), lr=0.25)
    h.optimiser_update("halving", param, h.asarray([1.0, 1.0]), lr=0.25)
    numpy.testing.assert_allclose(param.to_numpy(), [0.0, 1.0])
    assert type(h.kernels.updates.rules["halving"]).__name__ == "HalvingTwice"
    with pytest.raises(SigmaError, match="the 'numpy' kernel of update_rule 'broken' from sigmann-halving 0.1"):
        h.optimiser_update("broken", param, h.zeros(2), lr=0.1)

"""Optimisers: updates against NumPy references, freezing, checkpoints, buffer reuse."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import NumpyHandler, build
from sigma_core.errors import ConfigError, ShapeError, SigmaError, UnknownComponentError
from sigma_core.training.optimisers import (
    Adadelta,
    Adagrad,
    Adam,
    GradientDescent,
    Momentum,
    Nesterov,
    RMSProp,
)


def make_handler(dtype="float64", seed=0):
    return NumpyHandler(dtype, seed)


# -- hand-written NumPy references: (param, grads) -> param after each grad ---------------------


def ref_sgd(p, grads, lr):
    for g in grads:
        p = p - lr * g
    return p


def ref_momentum(p, grads, lr, mu, nesterov=False):
    v = numpy.zeros_like(p)
    for g in grads:
        v = mu * v + g
        p = p - lr * (g + mu * v if nesterov else v)
    return p


def ref_adagrad(p, grads, lr, eps):
    s = numpy.zeros_like(p)
    for g in grads:
        s = s + g * g
        p = p - lr * g / (numpy.sqrt(s) + eps)
    return p


def ref_adadelta(p, grads, lr, rho, eps):
    eg, ex = numpy.zeros_like(p), numpy.zeros_like(p)
    for g in grads:
        eg = rho * eg + (1 - rho) * g * g
        dx = -numpy.sqrt(ex + eps) / numpy.sqrt(eg + eps) * g
        ex = rho * ex + (1 - rho) * dx * dx
        p = p + lr * dx
    return p


def ref_rmsprop(p, grads, lr, rho, eps):
    s = numpy.zeros_like(p)
    for g in grads:
        s = rho * s + (1 - rho) * g * g
        p = p - lr * g / (numpy.sqrt(s) + eps)
    return p


def ref_adam(p, grads, lr, b1, b2, eps):
    m, v = numpy.zeros_like(p), numpy.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        p = p - lr * m_hat / (numpy.sqrt(v_hat) + eps)
    return p


CASES = {
    "sgd": (lambda: GradientDescent(0.1), lambda p, gs: ref_sgd(p, gs, 0.1)),
    "momentum": (lambda: Momentum(0.05, 0.8), lambda p, gs: ref_momentum(p, gs, 0.05, 0.8)),
    "nesterov": (lambda: Nesterov(0.05, 0.8), lambda p, gs: ref_momentum(p, gs, 0.05, 0.8, nesterov=True)),
    "adagrad": (lambda: Adagrad(0.3), lambda p, gs: ref_adagrad(p, gs, 0.3, 1e-6)),
    "adadelta": (lambda: Adadelta(), lambda p, gs: ref_adadelta(p, gs, 1.0, 0.95, 1e-6)),
    "rmsprop": (lambda: RMSProp(0.01), lambda p, gs: ref_rmsprop(p, gs, 0.01, 0.9, 1e-8)),
    "adam": (lambda: Adam(0.05), lambda p, gs: ref_adam(p, gs, 0.05, 0.9, 0.999, 1e-8)),
}
NAMES = sorted(CASES)


def layer_params(h, rng):
    shapes = {"1-dense.weights": (4, 3), "1-dense.biases": (3,), "2-dense.weights": (3, 2), "2-dense.biases": (2,)}
    return {pid: h.asarray(rng.standard_normal(shape)) for pid, shape in shapes.items()}


def grads_for(h, params, rng):
    return {pid: h.asarray(rng.standard_normal(p.shape)) for pid, p in params.items()}


@pytest.mark.parametrize("name", NAMES)
def test_three_steps_match_numpy_reference(name):
    make, reference = CASES[name]
    h, rng = make_handler(), numpy.random.default_rng(1)
    start = rng.standard_normal((5, 4))
    grads = [rng.standard_normal((5, 4)) for _ in range(3)]
    param, optimiser = h.asarray(start), make()
    for g in grads:
        optimiser.step(h, {"w": param}, {"w": h.asarray(g)})
    numpy.testing.assert_allclose(param.to_numpy(), reference(start, grads), rtol=1e-12, atol=1e-14)
    assert optimiser.steps == 3


LEARNING_RATES = {
    "sgd": 0.1, "momentum": 0.05, "nesterov": 0.05, "adagrad": 0.5, "adadelta": 1.0, "rmsprop": 0.01, "adam": 0.05,
}


@pytest.mark.parametrize("name, lr", sorted(LEARNING_RATES.items()))
def test_reduces_a_quadratic_loss(name, lr):
    h, rng = make_handler(), numpy.random.default_rng(2)
    target = h.asarray(rng.standard_normal(10))
    param = h.asarray(rng.standard_normal(10) * 3)
    optimiser = build("optimiser", {"type": name, "learning_rate": lr})

    def loss():
        return float(((param - target) * (param - target)).sum()) / 2

    before = loss()
    for _ in range(40):
        optimiser.step(h, {"p": param}, {"p": param - target})
    assert loss() < 0.9 * before


@pytest.mark.parametrize("name", NAMES)
def test_frozen_parameters_stay_bit_identical(name):
    h, rng = make_handler(), numpy.random.default_rng(3)
    params = layer_params(h, rng)
    optimiser = CASES[name][0]()
    optimiser.freeze("*.biases")
    optimiser.freeze("1-dense.*")
    before = {pid: p.to_numpy() for pid, p in params.items()}
    grads = grads_for(h, params, rng)
    del grads["1-dense.biases"]  # a frozen parameter needs no gradient
    optimiser.step(h, params, grads)
    for pid in ("1-dense.weights", "1-dense.biases", "2-dense.biases"):
        assert numpy.array_equal(params[pid].to_numpy(), before[pid]), pid
    assert not numpy.array_equal(params["2-dense.weights"].to_numpy(), before["2-dense.weights"])
    assert optimiser.published["frozen"] == ["1-dense.weights", "1-dense.biases", "2-dense.biases"]


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


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_continues_identically(name):
    rng = numpy.random.default_rng(4)
    make = CASES[name][0]
    h1, h2 = make_handler(), make_handler()
    params1 = layer_params(h1, rng)
    grads = [grads_for(h1, params1, rng) for _ in range(4)]
    first = make()
    first.freeze("2-dense.biases")
    for g in grads[:2]:
        first.step(h1, params1, g)
    state = first.state_dict()
    saved = {pid: {k: v.copy() for k, v in buffers.items()} for pid, buffers in state["memory"].items()}

    params2 = {pid: h2.asarray(p.to_numpy()) for pid, p in params1.items()}
    second = make()
    second.load_state_dict(state, h2)
    assert second.filters == ("2-dense.biases",) and second.steps == 2
    for g in grads[2:]:
        first.step(h1, params1, g)
        second.step(h2, params2, {pid: h2.asarray(a.to_numpy()) for pid, a in g.items()})
    for pid in params1:
        assert numpy.array_equal(params1[pid].to_numpy(), params2[pid].to_numpy()), pid
    for pid, buffers in saved.items():  # the checkpoint is a copy, not a view of live memory
        for key, value in buffers.items():
            assert numpy.array_equal(state["memory"][pid][key], value)


def test_loading_another_optimisers_state_is_an_error():
    with pytest.raises(SigmaError, match="Adam.*'Adagrad'"):
        Adam().load_state_dict(Adagrad().state_dict(), make_handler())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "decay+publish"])
def test_step_in_a_session_allocates_nothing_after_warm_up(name, extras):
    h, rng = make_handler("float32"), numpy.random.default_rng(5)
    params = layer_params(h, rng)
    targets = {pid: h.asarray(rng.standard_normal(p.shape)) for pid, p in params.items()}
    optimiser = CASES[name][0]()
    if extras:
        optimiser.weight_decay = 0.01
        optimiser.publish_updates = True

    def iteration():
        with h.session():
            grads = {pid: params[pid] - targets[pid] for pid in params}
            optimiser.step(h, params, grads)

    iteration()  # warm-up: memory is made (and kept) here, buffers enter the pool
    allocations = h.allocations
    iteration()
    iteration()
    assert h.allocations == allocations
    assert all(p.dtype == "float32" for p in params.values())


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
    optimiser = Momentum(0.1, 0.5)
    optimiser.step(h, {"w": param}, {"w": h.asarray([1.0])})  # v = 1, p = 0.9
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
    optimiser = build("optimiser", {"type": "adagrad", "learning_rate": 0.02, "freeze": ["*.biases"]})
    assert isinstance(optimiser, Adagrad)
    assert optimiser.learning_rate == 0.02 and optimiser.filters == ("*.biases",)
    assert isinstance(build("optimiser", {"type": "gradient_descent"}), GradientDescent)
    assert isinstance(build("optimiser", {"type": "nesterov"}), Nesterov)
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
    with pytest.raises(SigmaError, match="handler 'numpy' has no optimiser update rule 'lion'"):
        h.optimiser_update("lion", param, h.zeros(2))

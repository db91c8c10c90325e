"""Finite-difference checks of every built-in layer's gradients.

Each test builds a small float64 network, takes the tape's gradient of the
cost with respect to every parameter and the inputs, and compares it with
central differences (eps 1e-6). Perturbations go through the handler:
``to_numpy`` -> change one element -> ``handler.fill``, as user code must.
"""

from __future__ import annotations

import numpy
import pytest

from sigma_core import NumpyHandler
from sigma_core.model.architecture import Architecture, Construct
from sigma_core.model.constructs import (
    Add,
    Concatenate,
    Dense,
    Dropout,
    Elementwise,
    Input,
    SoftmaxCE,
    SquaredDifference,
)
from sigma_core.model.network import Network

EPS = 1e-6
RTOL = 1e-5
ATOL = 1e-8
MAX_ELEMENTS = 30
BATCH = 3


# -- the reusable checker ------------------------------------------------------------------


def build(architecture, seed=0, scale=0.5):
    """A float64 network with every parameter set to random values (not the initialisers' special ones)."""
    handler = NumpyHandler("float64", seed=seed)
    network = Network(architecture)
    network.initialise(handler)
    rng = numpy.random.default_rng(seed + 100)
    for array in network.parameters.values():
        handler.fill(array, handler.asarray(rng.normal(0.0, scale, array.shape)))
    return handler, network


def set_param(handler, network, pid, value):
    handler.fill(network.parameters[pid], handler.asarray(numpy.asarray(value, dtype="float64")))


def evaluate(handler, network, externals, training, rng_state):
    """The cost (a float) for NumPy externals; reseeds first so dropout draws the same mask."""
    if rng_state is not None:
        handler.set_rng_state(rng_state)
    arrays = {alias: handler.asarray(value) for alias, value in externals.items()}
    with handler.no_grad():
        result = network.forward(arrays, training=training)
    return float(result.cost)


def _indices(size, rng):
    if size <= MAX_ELEMENTS:
        return range(size)
    return rng.choice(size, MAX_ELEMENTS, replace=False)


def check_gradients(handler, network, externals, *, wrt=("inputs",), training=False):
    """Compare analytic and central-difference gradients of the cost for every parameter and ``wrt`` input.

    Returns (cost, {name: analytic gradient}) so tests can add their own checks.
    """
    rng_state = handler.rng_state() if training else None
    if rng_state is not None:
        handler.set_rng_state(rng_state)
    arrays = {alias: handler.asarray(value) for alias, value in externals.items()}
    sources = dict(network.parameters)
    for alias in wrt:
        sources[f"<{alias}>"] = arrays[alias]
    with handler.tape() as tape:
        tape.watch(*sources.values())
        result = network.forward(arrays, training=training)
        grads = tape.gradient(result.cost, list(sources.values()))
    cost = float(result.cost)
    analytic = {name: grad.to_numpy() for name, grad in zip(sources, grads)}
    assert cost == pytest.approx(evaluate(handler, network, externals, training, rng_state), rel=1e-12)

    pick = numpy.random.default_rng(1)
    for name, grad in analytic.items():
        assert grad.shape == sources[name].shape, name
        assert numpy.all(numpy.isfinite(grad)), name
        assert numpy.any(grad != 0.0), f"{name}: the gradient is identically zero; the check would be vacuous"
        numeric = numpy.zeros(grad.size)
        expected = numpy.zeros(grad.size)
        chosen = list(_indices(grad.size, pick))
        if name.startswith("<"):
            alias = name[1:-1]
            base = numpy.array(externals[alias], dtype="float64")
            for n, i in enumerate(chosen):
                values = []
                for sign in (1.0, -1.0):
                    moved = base.copy()
                    moved.flat[i] += sign * EPS
                    values.append(evaluate(handler, network, {**externals, alias: moved}, training, rng_state))
                numeric[n] = (values[0] - values[1]) / (2 * EPS)
                expected[n] = grad.flat[i]
        else:
            param = network.parameters[name]
            base = param.to_numpy()
            for n, i in enumerate(chosen):
                values = []
                for sign in (1.0, -1.0):
                    moved = base.copy()
                    moved.flat[i] += sign * EPS
                    handler.fill(param, handler.asarray(moved))
                    values.append(evaluate(handler, network, externals, training, rng_state))
                handler.fill(param, handler.asarray(base))
                numeric[n] = (values[0] - values[1]) / (2 * EPS)
                expected[n] = grad.flat[i]
            numpy.testing.assert_array_equal(param.to_numpy(), base)  # restored exactly
        numpy.testing.assert_allclose(
            expected[: len(chosen)], numeric[: len(chosen)], rtol=RTOL, atol=ATOL, err_msg=f"gradient of {name}"
        )
    return cost, analytic


def data(*shape, seed=0, low=-1.0, high=1.0):
    return numpy.random.default_rng(seed).uniform(low, high, shape)


def one_hot(labels, classes):
    return numpy.eye(classes)[labels]


# -- the helper itself must catch a wrong gradient --------------------------------------------------


def test_checker_detects_a_wrong_gradient(monkeypatch):
    handler, network = build(Input(4) + Dense(3, "tanh") + SquaredDifference())
    externals = {"inputs": data(BATCH, 4), "targets": data(BATCH, 3, seed=1)}
    check_gradients(handler, network, externals)  # passes as is

    from sigma_core.compute.ops.fused import Dense as DenseOp

    real = DenseOp.backward

    def doubled(self, *args, **params):
        return tuple(None if x is None else x * 2.0 for x in real(self, *args, **params))

    monkeypatch.setattr(DenseOp, "backward", doubled)
    handler, network = build(Input(4) + Dense(3, "tanh") + SquaredDifference())  # resolves the op anew
    with pytest.raises(AssertionError, match="gradient of"):
        check_gradients(handler, network, externals)


# -- dense ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["none", "relu", "sigmoid", "tanh", "softplus"])
def test_dense_activations(activation):
    handler, network = build(Input(4) + Dense(6, activation, name="layer") + SquaredDifference())
    x = data(BATCH, 4)
    if activation == "relu":
        # Keep every pre-activation far from relu's kink, with both branches used:
        # small weights and biases of alternating sign and magnitude 1.
        weights = numpy.random.default_rng(5).normal(0.0, 0.1, (4, 6))
        biases = numpy.array([1.0, -1.0] * 3)
        set_param(handler, network, "layer.weights", weights)
        set_param(handler, network, "layer.biases", biases)
        z = x @ weights + biases
        assert numpy.abs(z).min() > 0.3
        assert (z > 0).any() and (z < 0).any()
    externals = {"inputs": x, "targets": data(BATCH, 6, seed=1)}
    cost, grads = check_gradients(handler, network, externals)
    if activation == "relu":  # inactive units get no gradient
        dead = (x @ network.parameters["layer.weights"].to_numpy() + numpy.array([1.0, -1.0] * 3)) < 0
        assert numpy.all(grads["layer.biases"][dead.all(axis=0)] == 0.0)


SWISH_PLUGIN = """
    from sigma_core.hookspecs import hookimpl

    def swish(h, x):
        return x * h.sigmoid(x)

    @hookimpl
    def register_activations(register):
        register("swish", swish, aliases=("silu",))
"""


def test_dense_with_a_plugin_activation(fake_site):
    """An activation a plugin registers is applied after the dense product and differentiated."""
    fake_site.add("swish-plugin", entry_points={"swish": "swish_plugin_mod"}, modules={"swish_plugin_mod": SWISH_PLUGIN})
    handler, network = build(Input(4) + Dense(5, "silu", name="layer") + SquaredDifference())
    x = data(BATCH, 4)
    externals = {"inputs": x, "targets": data(BATCH, 5, seed=1)}
    check_gradients(handler, network, externals)
    z = x @ network.parameters["layer.weights"].to_numpy() + network.parameters["layer.biases"].to_numpy()
    expected = z / (1.0 + numpy.exp(-z))
    got = network.forward({k: handler.asarray(v) for k, v in externals.items()}).outputs["predictions"].to_numpy()
    numpy.testing.assert_allclose(got, expected, rtol=1e-12)


def test_dense_without_bias():
    handler, network = build(Input(4) + Dense(3, "tanh", bias=False, name="layer") + SquaredDifference())
    assert list(network.parameters) == ["layer.weights"]
    check_gradients(handler, network, {"inputs": data(BATCH, 4), "targets": data(BATCH, 3, seed=1)})


def test_dense_flattens_multi_axis_input():
    handler, network = build(Input(3, 4) + Dense(5, "tanh", name="flat") + Dense(2) + SquaredDifference())
    assert network.parameters["flat.weights"].shape == (12, 5)
    externals = {"inputs": data(BATCH, 3, 4), "targets": data(BATCH, 2, seed=1)}
    check_gradients(handler, network, externals)
    # the flattening is row-major over the per-sample axes: same as feeding the flat input
    flat_handler, flat_network = build(Input(12) + Dense(5, "tanh", name="flat") + Dense(2) + SquaredDifference())
    flat_network.load_state_dict(network.state_dict())
    flat = {"inputs": externals["inputs"].reshape(BATCH, 12), "targets": externals["targets"]}
    assert evaluate(flat_handler, flat_network, flat, False, None) == pytest.approx(
        evaluate(handler, network, externals, False, None), rel=1e-12
    )


def test_dense_time_distributed():
    handler, network = build(Input(4, 3) + Dense(5, "tanh", time_distributed=True, name="td") + SquaredDifference())
    assert network.layers["td"].output_shape == (4, 5)
    assert network.parameters["td.weights"].shape == (3, 5)
    x = data(BATCH, 4, 3)
    externals = {"inputs": x, "targets": data(BATCH, 4, 5, seed=1)}
    check_gradients(handler, network, externals)
    with handler.no_grad():
        out = network.forward({"inputs": handler.asarray(x)}).outputs["predictions"].to_numpy()
    w, b = network.parameters["td.weights"].to_numpy(), network.parameters["td.biases"].to_numpy()
    numpy.testing.assert_allclose(out, numpy.tanh(x @ w + b), rtol=1e-12)  # same weights at every step


# -- elementwise and dropout -------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["tanh", "sigmoid", "none"])
def test_elementwise(activation):
    handler, network = build(Input(2, 3) + Elementwise(activation, name="ew") + SquaredDifference())
    assert network.parameters["ew.weights"].shape == (2, 3)
    assert network.parameters["ew.biases"].shape == ()
    externals = {"inputs": data(BATCH, 2, 3), "targets": data(BATCH, 2, 3, seed=1)}
    check_gradients(handler, network, externals)


def test_elementwise_states_saved_under_the_old_name_bias_still_load():
    """Every bias is named "biases"; Elementwise's was "bias" until then, and its old checkpoints load."""
    from sigma_core.training.optimisers import Adam

    handler, network = build(Input(2, 3) + Elementwise("tanh", name="ew") + SquaredDifference())
    state = network.state_dict()
    state["ew.bias"] = state.pop("ew.biases") + 1.5
    network.load_state_dict(state)
    assert network.parameters["ew.biases"].to_numpy() == state["ew.bias"]
    old = Adam(0.1)
    old.step(handler, {"ew.bias": handler.number(1.0)}, {"ew.bias": handler.number(0.5)})
    adam = Adam(0.1)
    adam.load_state_dict(old.state_dict(), handler)
    adam.step(handler, {"ew.biases": handler.number(1.0)}, {"ew.biases": handler.number(0.5)})
    assert adam.state_dict()["parameter_steps"] == {"ew.biases": 2}  # its memory and step count carried on
    assert set(adam.state_dict()["memory"]) == {"ew.biases"}


def test_dropout_in_training_mode_with_a_fixed_mask():
    handler, network = build(Input(6) + Dense(8, "tanh") + Dropout(0.5) + Dense(3) + SquaredDifference())
    externals = {"inputs": data(BATCH, 6), "targets": data(BATCH, 3, seed=1)}
    state = handler.rng_state()
    first = evaluate(handler, network, externals, True, state)
    assert evaluate(handler, network, externals, True, state) == first  # reseeding fixes the mask
    assert evaluate(handler, network, externals, True, None) != first  # a fresh draw changes it
    assert evaluate(handler, network, externals, False, None) != first  # the mask does something
    handler.set_rng_state(state)
    check_gradients(handler, network, externals, training=True)


def test_dropout_gradient_is_masked_and_rescaled():
    handler, network = build(Input(40) + Dropout(0.25) + SquaredDifference())
    x, t = data(2, 40), data(2, 40, seed=1)
    _, grads = check_gradients(handler, network, {"inputs": x, "targets": t}, training=True)
    g = grads["<inputs>"]
    # cost = Σ (m·x − t)² / rows with m ∈ {0, 1/(1−p)}: zero where dropped, rescaled where kept
    dropped = g == 0.0
    assert 0 < dropped.sum() < g.size
    scale = 1.0 / 0.75
    numpy.testing.assert_allclose(g[~dropped], (2 * (scale * x - t) * scale / 2)[~dropped], rtol=1e-12)


# -- costs ----------------------------------------------------------------------------------------


def _logits(handler, network, x):
    with handler.no_grad():
        return network.forward({"inputs": handler.asarray(x)}).outputs["predictions"].to_numpy()


def _reference_ce(logits, labels):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp = shifted - numpy.log(numpy.exp(shifted).sum(axis=-1, keepdims=True))
    return -logp[numpy.arange(len(labels)), labels].mean()


@pytest.mark.parametrize("target_kind", ["one_hot", "integer"])
def test_softmax_cross_entropy(target_kind):
    handler, network = build(Input(5) + Dense(4, "tanh") + Dense(3) + SoftmaxCE(), scale=1.0)
    x = data(4, 5)
    labels = numpy.array([0, 2, 1, 2])
    targets = one_hot(labels, 3) if target_kind == "one_hot" else labels.astype("int64")
    cost, _ = check_gradients(handler, network, {"inputs": x, "targets": targets})
    assert cost == pytest.approx(_reference_ce(_logits(handler, network, x), labels), rel=1e-12)


def test_softmax_cross_entropy_one_hot_and_integer_agree():
    handler, network = build(Input(5) + Dense(3) + SoftmaxCE())
    x, labels = data(4, 5), numpy.array([1, 0, 2, 1])
    onehot_cost, onehot = check_gradients(handler, network, {"inputs": x, "targets": one_hot(labels, 3)})
    int_cost, ints = check_gradients(handler, network, {"inputs": x, "targets": labels})
    assert onehot_cost == pytest.approx(int_cost, rel=1e-12)
    for name in onehot:
        numpy.testing.assert_allclose(onehot[name], ints[name], rtol=1e-10, atol=1e-14)


def test_softmax_cross_entropy_soft_targets_and_time_axis():
    handler, network = build(Input(4, 3) + Dense(5, time_distributed=True) + SoftmaxCE(), scale=1.0)
    soft = numpy.random.default_rng(3).dirichlet(numpy.ones(5), size=(2, 4))
    check_gradients(handler, network, {"inputs": data(2, 4, 3), "targets": soft})
    labels = numpy.random.default_rng(4).integers(0, 5, size=(2, 4))
    cost, _ = check_gradients(handler, network, {"inputs": data(2, 4, 3), "targets": labels})
    logits = _logits(handler, network, data(2, 4, 3)).reshape(-1, 5)
    assert cost == pytest.approx(_reference_ce(logits, labels.reshape(-1)), rel=1e-12)


def test_squared_difference():
    handler, network = build(Input(4) + Dense(3, "sigmoid") + SquaredDifference())
    x, t = data(5, 4), data(5, 3, seed=1)
    cost, _ = check_gradients(handler, network, {"inputs": x, "targets": t})
    predictions = _logits(handler, network, x)
    assert cost == pytest.approx(((predictions - t) ** 2).sum() / 5, rel=1e-12)


def test_two_costs_weighted_by_importance():
    source = Input(4, name="in")
    hidden = Construct("dense", name="hidden", size=5, activation="tanh").link(source)
    head_a = Construct("dense", name="head_a", size=2).link(hidden)
    head_b = Construct("dense", name="head_b", size=3).link(hidden)
    cost_a = SquaredDifference(importance=0.3, name="cost_a", targets="ta").link(head_a)
    cost_b = SoftmaxCE(importance=2.5, name="cost_b", targets="tb").link(head_b)
    handler, network = build(Architecture([source, hidden, head_a, head_b, cost_a, cost_b]))
    externals = {"inputs": data(BATCH, 4), "ta": data(BATCH, 2, seed=1), "tb": numpy.array([0, 2, 1])}

    with handler.no_grad():
        result = network.forward({k: handler.asarray(v) for k, v in externals.items()})
    partial = {name: float(cost) for name, cost in result.partial_costs.items()}
    assert set(partial) == {"cost_a", "cost_b"}
    assert float(result.cost) == pytest.approx(0.3 * partial["cost_a"] + 2.5 * partial["cost_b"], rel=1e-12)
    check_gradients(handler, network, externals)

    # a cost layer whose targets are missing is skipped, and the total is just the other one
    with handler.no_grad():
        only_a = network.forward({k: handler.asarray(externals[k]) for k in ("inputs", "ta")})
    assert list(only_a.partial_costs) == ["cost_a"]
    assert float(only_a.cost) == pytest.approx(0.3 * partial["cost_a"], rel=1e-12)


# -- a branching graph ----------------------------------------------------------------------------


def test_branching_graph_with_concatenate_and_residual_add():
    in_a = Input(4, name="in_a")
    in_b = Input(2, 3, name="in_b", external="side")
    dense_a = Dense(5, "tanh", name="dense_a").link(in_a)
    dense_b = Dense(6, "sigmoid", name="dense_b").link(in_b)
    joined = Concatenate(name="joined").link(dense_a, dense_b)
    mix = Dense(4, "tanh", name="mix").link(joined)
    residual = Dense(4, "softplus", name="residual").link(mix)
    summed = Add(name="summed").link(residual, mix)
    head = Dense(2, name="head").link(summed)
    cost = SquaredDifference(name="cost").link(head)
    # declaration order is deliberately not execution order
    architecture = Architecture([cost, head, summed, residual, mix, joined, dense_b, dense_a, in_b, in_a])
    handler, network = build(architecture)
    assert network.layers["joined"].output_shape == (11,)
    assert list(network.layers).index("summed") > list(network.layers).index("residual")
    assert network._sources["summed"] == ["residual", "mix"]
    externals = {"inputs": data(BATCH, 4), "side": data(BATCH, 2, 3, seed=2), "targets": data(BATCH, 2, seed=1)}
    check_gradients(handler, network, externals, wrt=("inputs", "side"))

"""The sequence ops (``rnn_sequence``, ``lstm_sequence``) and the layers that use them, on the numpy handler.

Finite-difference checks of both ops come from their ``examples()`` (the
conformance kit runs them on every handler) and test_recurrent_layout.py; here:
equality with the step-by-step implementation the layers had before (kept
below, in handler ops, as the reference) and with a plain NumPy loop, one tape
record per sequence, and shape errors.
"""

from __future__ import annotations

import numpy
import pytest

from sigma_core import Input, Network, NumpyHandler, ShapeError, SquaredDifference
from sigmann_recurrent import LSTM, Recurrent

BATCH, STEPS, FEATURES, SIZE = 3, 5, 4, 6


def old_sequence(handler, x, w, u, b, gates, sequences, activation="tanh"):
    """The layers' former per-step loop (~15 recorded ops per step), verbatim in handler ops."""
    batch, steps, features = x.shape
    projected = handler.reshape(handler.dense(handler.reshape(x, (-1, features)), w, b), (batch, steps, -1))
    n = u.shape[0]
    state = cell = None
    states = []
    for t in range(steps):
        z = projected[:, t, :]
        if state is not None:
            z = z + state @ u
        if gates == 1:
            state = getattr(handler, activation)(z) if activation != "none" else z
        else:
            i, f = handler.sigmoid(z[:, :n]), handler.sigmoid(z[:, n : 2 * n])
            g, o = handler.tanh(z[:, 2 * n : 3 * n]), handler.sigmoid(z[:, 3 * n :])
            cell = i * g if cell is None else f * cell + i * g
            state = o * handler.tanh(cell)
        states.append(state)
    return handler.stack(states, axis=1) if sequences else state


def numpy_lstm(x, w, u, b):
    """A plain NumPy LSTM (gates i, f, g, o), every hidden state."""
    n = u.shape[0]
    sigmoid = lambda v: 1 / (1 + numpy.exp(-v))  # noqa: E731
    h, c, out = numpy.zeros((x.shape[0], n)), numpy.zeros((x.shape[0], n)), []
    for t in range(x.shape[1]):
        z = x[:, t] @ w + h @ u + b
        c = sigmoid(z[:, n : 2 * n]) * c + sigmoid(z[:, :n]) * numpy.tanh(z[:, 2 * n : 3 * n])
        h = sigmoid(z[:, 3 * n :]) * numpy.tanh(c)
        out.append(h)
    return numpy.stack(out, axis=1)


def _inputs(gates, seed=0):
    rng = numpy.random.default_rng(seed)
    width = gates * SIZE
    return [rng.standard_normal(s) * 0.7 for s in ((BATCH, STEPS, FEATURES), (FEATURES, width), (SIZE, width), (width,))]


def _run(handler, fn, values, sequences):
    """Output and the gradients of sum(output · weights) for every input, with the tape's record count."""
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        tape.watch(*arrays)
        out = fn(handler, *arrays)
        records = len(tape._records)
        weights = numpy.random.default_rng(9).standard_normal(out.shape)
        grads = tape.gradient(out, arrays, seed=handler.asarray(weights))
    return out.to_numpy(), [g.to_numpy() for g in grads], records


CASES = [("lstm", 4, None, s) for s in (True, False)] + [
    ("rnn", 1, a, s) for a in ("tanh", "sigmoid", "relu", "none") for s in (True, False)
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind, gates, activation, sequences", CASES)
def test_sequence_op_equals_the_former_step_loop(dtype, kind, gates, activation, sequences, assert_close):
    handler = NumpyHandler(dtype)
    values = _inputs(gates)
    if kind == "lstm":
        new = lambda h, x, w, u, b: h.op("lstm_sequence", x, w, u, b, sequences=sequences)  # noqa: E731
    else:
        new = lambda h, x, w, u, b: h.op("rnn_sequence", x, w, u, b, activation=activation,  # noqa: E731
                                          sequences=sequences)
    out, grads, records = _run(handler, new, values, sequences)
    old_out, old_grads, old_records = _run(
        handler, lambda h, *a: old_sequence(h, *a, gates, sequences, activation or "tanh"), values, sequences
    )
    depth = STEPS * (FEATURES + gates * SIZE)  # a step's widest sum: x·W + h·U
    assert_close(out, old_out, dtype, depth)
    for name, grad, old in zip(("x", "weights", "recurrent_weights", "biases"), grads, old_grads):
        assert grad.dtype == dtype
        assert_close(grad, old, dtype, depth, name)
    assert records == 1 and old_records > 3 * STEPS  # one record per sequence instead of several per step


def test_lstm_sequence_matches_a_plain_numpy_loop(assert_close):
    handler = NumpyHandler("float64")
    values = _inputs(4, seed=3)
    out = handler.op("lstm_sequence", *[handler.asarray(v) for v in values]).to_numpy()
    assert_close(out, numpy_lstm(*values), "float64", STEPS * (FEATURES + 4 * SIZE))


def test_layers_record_one_op_per_sequence_and_keep_their_parameter_layout(assert_close):
    handler = NumpyHandler("float64", seed=0)
    network = Network(Input(STEPS, FEATURES) + LSTM(SIZE, name="lstm") + SquaredDifference())
    network.initialise(handler)
    assert network.parameters["lstm.weights"].shape == (FEATURES, 4 * SIZE)
    assert network.parameters["lstm.recurrent_weights"].shape == (SIZE, 4 * SIZE)
    x = handler.asarray(_inputs(4)[0])
    with handler.tape() as tape:
        params = [network.parameters[f"lstm.{p}"] for p in ("weights", "recurrent_weights", "biases")]
        tape.watch(*params)
        out = network.forward({"inputs": x}).outputs["predictions"]
        assert len(tape._records) == 1
    expected = numpy_lstm(x.to_numpy(), *[p.to_numpy() for p in params])
    assert_close(out.to_numpy(), expected, "float64", STEPS * (FEATURES + 4 * SIZE))


def test_recurrent_layer_with_a_plugin_activation_keeps_working(monkeypatch, assert_close):
    from sigma_core import plugins

    real_load = plugins.load
    square = lambda h, z: z * z  # noqa: E731  (a plugin-style activation: handler ops)
    monkeypatch.setattr(plugins, "load", lambda kind, name: square if name == "square" else real_load(kind, name))
    handler = NumpyHandler("float64", seed=0)
    network = Network(Input(STEPS, FEATURES) + Recurrent(SIZE, activation="square", name="rnn") + SquaredDifference())
    network.initialise(handler)
    x = numpy.random.default_rng(1).standard_normal((BATCH, STEPS, FEATURES)) * 0.3
    with handler.no_grad():
        out = network.forward({"inputs": handler.asarray(x)}).outputs["predictions"].to_numpy()
    w, u, b = (network.parameters[f"rnn.{p}"].to_numpy() for p in ("weights", "recurrent_weights", "biases"))
    state = numpy.zeros((BATCH, SIZE))
    for t in range(STEPS):
        state = (x[:, t] @ w + state @ u + b) ** 2
        assert_close(out[:, t], state, "float64", (t + 1) * (FEATURES + SIZE))


def test_sequence_ops_name_the_op_on_shape_errors():
    handler = NumpyHandler("float64")
    x, w, u, b = (handler.asarray(v) for v in _inputs(4))
    with pytest.raises(ShapeError, match=r"lstm_sequence: shapes .*\(6, 6\)"):
        handler.op("lstm_sequence", x, w, handler.zeros((SIZE, SIZE)), b)
    with pytest.raises(ShapeError, match="rnn_sequence"):
        handler.op("rnn_sequence", x, w, u, b)  # LSTM-sized weights for a one-gate RNN
    with pytest.raises(ShapeError, match="rnn_sequence: 'gelu' is not a built-in activation"):
        handler.op("rnn_sequence", x, *[handler.asarray(v) for v in _inputs(1)[1:]], activation="gelu")


@pytest.mark.parametrize("sequences", [True, False])
def test_training_steps_after_warm_up_allocate_no_buffers(sequences):
    from sigma_core import Dense, SoftmaxCE, Trainer
    from sigma_core.training.optimisers import GradientDescent

    layers = Input(STEPS, FEATURES) + LSTM(SIZE, sequences=sequences)
    if sequences:
        layers = layers + Recurrent(SIZE, sequences=False)
    trainer = Trainer(Network(layers + Dense(3) + SoftmaxCE()), GradientDescent(0.1), training_iterator=[])
    handler = NumpyHandler("float32", seed=0)
    trainer.initialise(handler)
    rng = numpy.random.default_rng(0)
    batch = {"inputs": rng.standard_normal((BATCH, STEPS, FEATURES)).astype("float32"), "targets": rng.integers(0, 3, BATCH)}
    costs = [float(trainer.run_iteration(batch)) for _ in range(2)]
    allocations = handler.allocations
    costs += [float(trainer.run_iteration(batch)) for _ in range(3)]
    assert handler.allocations == allocations
    assert costs[-1] < costs[0]  # it learns

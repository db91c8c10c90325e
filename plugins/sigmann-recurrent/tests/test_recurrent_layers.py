"""The ``recurrent`` and ``lstm`` layers: gradients on every handler (check_layer), shapes, initial values, and
how Sigma lists them."""

from __future__ import annotations

import json

import numpy
import pytest

from sigma_core import ArchitectureError, Input, Network, NumpyHandler, SquaredDifference, cli
from sigmann_recurrent import LSTM, Recurrent
from sigmann_testing import check_layer

LAYERS = [
    ("recurrent", {"size": 3}),
    ("rnn", {"size": 4, "activation": "sigmoid", "sequences": False}),
    ("recurrent", {"size": 3, "activation": "relu"}),
    ("lstm", {"size": 3}),
    ("lstm", {"size": 2, "sequences": False}),
]


@pytest.mark.parametrize("layer, arguments", LAYERS, ids=[f"{t[0]}-{i}" for i, t in enumerate(LAYERS)])
def test_gradients_match_finite_differences_on_every_handler(layer, arguments):
    outputs = check_layer(layer, input_shapes=[(4, 3)], **arguments)
    steps, size = 4, arguments["size"]
    assert all(out.shape == ((3, steps, size) if arguments.get("sequences", True) else (3, size))
               for out in outputs.values())


def test_recurrent_matches_a_numpy_reference(assert_close):
    batch, steps, features, size = 3, 3, 2, 4
    handler = NumpyHandler("float64", seed=0)
    network = Network(Input(steps, features) + Recurrent(size, name="rnn") + SquaredDifference())
    network.initialise(handler)
    x = numpy.random.default_rng(1).standard_normal((batch, steps, features))
    with handler.no_grad():
        out = network.forward({"inputs": handler.asarray(x)}).outputs["predictions"].to_numpy()
    w, u, b = (network.parameters[f"rnn.{p}"].to_numpy() for p in ("weights", "recurrent_weights", "biases"))
    state = numpy.zeros((batch, size))
    for t in range(steps):
        state = numpy.tanh(x[:, t] @ w + state @ u + b)
        assert_close(out[:, t], state, "float64", (t + 1) * (features + size))


def test_lstm_parameters_and_forget_bias_starting_at_one():
    handler = NumpyHandler("float64", seed=0)
    network = Network(Input(2, 3) + LSTM(4, name="lstm") + SquaredDifference())
    network.initialise(handler)
    assert network.parameter_count == 4 * (3 + 4 + 1) * 4  # 4 gates of (features + size + 1) × size
    biases = network.parameters["lstm.biases"].to_numpy()
    numpy.testing.assert_array_equal(biases[4:8], 1.0)
    numpy.testing.assert_array_equal(numpy.delete(biases, range(4, 8)), 0.0)


def test_recurrent_layers_need_sequences():
    for layer in (Recurrent(3, name="rnn"), LSTM(3, name="rnn")):
        with pytest.raises(ArchitectureError, match="'rnn'.*\\(batch, time, features\\)"):
            Network(Input(4) + layer)


def test_sigma_plugins_lists_the_layers_and_ops_from_this_distribution(capsys):
    assert cli.main(["plugins", "--json"]) == 0
    rows = {(row["kind"], row["name"]): row for row in json.loads(capsys.readouterr().out)}
    for key in (("layer", "recurrent"), ("layer", "lstm"), ("op", "rnn_sequence"), ("op", "lstm_sequence")):
        assert rows[key]["distribution"] == "sigmann-recurrent"
    assert rows["layer", "recurrent"]["aliases"] == ["rnn"]

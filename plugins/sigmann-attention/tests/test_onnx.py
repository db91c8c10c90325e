"""``sigma export --format onnx`` of a transformer: onnxruntime runs the exported GPT and agrees with the network."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import Architecture, Dense, Input, Network, NumpyHandler, SoftmaxCE, SquaredDifference
from sigmann_attention import GPT, Attention

onnxruntime = pytest.importorskip("onnxruntime", reason="the test extra installs onnxruntime")
export_onnx = pytest.importorskip("sigmann_onnx.export", reason="the test extra installs sigmann-onnx").export_onnx

#: float32 agrees to its own precision, ~10 sums of width <= 32 deep; float64 to float32's erf (onnxruntime has no
#: float64 Erf: sigmann_attention.onnx.gelu), scaled by the logits' size, not to float64's rounding.
TOLERANCE = {"float64": 1e-6, "float32": 2e-5}


def _session(network, tmp_path):
    path = export_onnx(network, tmp_path / "model.onnx")
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("tie_weights", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_onnxruntime_reproduces_a_gpt(tmp_path, dtype, tie_weights):
    """Embedding, positional table, causal attention, token norm, GELU dense layers over time steps, logits (tied:
    through the embedding's table, in the graph once)."""
    network = Network(GPT(vocabulary=11, context=6, width=8, heads=2, layers=2, tie_weights=tie_weights), name="gpt")
    network.initialise(NumpyHandler(dtype, seed=3))
    ids = numpy.random.default_rng(0).integers(0, 11, (5, 6))
    predictions, probabilities = _session(network, tmp_path).run(None, {"inputs": ids.astype(dtype)})
    expected = network.predict(ids)
    assert predictions.shape == (5, 6, 11)
    numpy.testing.assert_allclose(predictions, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    softmax = numpy.exp(expected - expected.max(-1, keepdims=True))
    numpy.testing.assert_allclose(probabilities, softmax / softmax.sum(-1, keepdims=True), rtol=TOLERANCE[dtype],
                                  atol=TOLERANCE[dtype])


@pytest.mark.parametrize("causal", [True, False])
def test_a_padding_mask_is_a_second_graph_input_and_a_query_with_no_key_outputs_zeros(tmp_path, causal):
    x, mask = Input(4, 6, name="x"), Input(4, name="mask", external="mask")
    attention = Attention(2, causal=causal, name="attention").link(x, mask)
    up = Dense(6, "gelu_tanh", time_distributed=True, name="up").link(attention)
    network = Network(Architecture([x, mask, attention, up]) + SquaredDifference(), name="masked")
    handler = NumpyHandler("float64", seed=1)
    network.initialise(handler)
    tokens = numpy.random.default_rng(2).standard_normal((3, 4, 6))
    masks = numpy.array([[1, 1, 1, 0], [1, 0, 1, 1], [0, 0, 0, 0.0]])  # the last: every key hidden
    with handler.no_grad():
        externals = {"inputs": handler.asarray(tokens), "mask": handler.asarray(masks)}
        expected = network.forward(externals).outputs["predictions"].to_numpy()
    (predictions,) = _session(network, tmp_path).run(None, {"inputs": tokens, "mask": masks})
    numpy.testing.assert_allclose(predictions, expected, rtol=1e-10, atol=1e-10)


def test_an_activation_without_an_exporter_is_named_with_those_that_have_one():
    from types import SimpleNamespace

    from sigma_core import SigmaError
    from sigmann_onnx.layers import activate

    def swish(handler, x):
        return x * handler.sigmoid(x)

    with pytest.raises(SigmaError, match=r"layer 'd': activation 'swish' does not export to ONNX; these do: none, "
                                         r"relu, sigmoid, tanh, softplus, (.*, )?gelu, gelu_tanh"):
        activate(None, "d", SimpleNamespace(activation=swish), "x")

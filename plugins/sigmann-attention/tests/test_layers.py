"""The layers: gradients on every handler (check_layer), what they compute, and bad geometry as one line naming
the layer with exit status 2 from ``sigma train``."""

from __future__ import annotations

import json
import numpy
import pytest

from sigma_core import Architecture, Input, Network, NumpyHandler, SquaredDifference, cli_main
from sigmann_attention import GPT, Attention, Embedding, Positional, TokenNorm
from sigmann_testing import check_layer

#: (layer, its input's record shape, arguments, the output's record shape)
LAYERS = [
    ("positional", (4, 3), {"context": 6}, (4, 3)),
    ("attention", (4, 6), {"heads": 2}, (4, 6)),
    ("attention", (3, 4), {"heads": 1, "causal": False}, (3, 4)),
    ("attention", (4, 4), {"heads": 2, "dropout": 0.3}, (4, 4)),  # training mode: the same mask for every pass
    ("token_norm", (3, 5), {}, (3, 5)),
    ("tied_logits", (4, 3), {"vocabulary": 5}, (4, 5)),  # alone its table is its own: x·Wᵀ's gradients
    ("dense", (4,), {"size": 3, "activation": "gelu"}, (3,)),
    ("dense", (4,), {"size": 3, "activation": "gelu_tanh"}, (3,)),
]


@pytest.mark.parametrize("layer, shape, arguments, output", LAYERS, ids=[f"{t[0]}-{i}" for i, t in enumerate(LAYERS)])
def test_gradients_match_finite_differences_on_every_handler(layer, shape, arguments, output):
    outputs = check_layer(layer, input_shapes=[shape], **arguments)
    assert all(out.shape == (3, *output) for out in outputs.values())


def test_attention_takes_a_padding_mask_as_second_input():
    """check_layer's random inputs are never 0, so the mask's effect is checked here: padding keys change nothing."""
    handler = NumpyHandler("float64", seed=0)
    x, mask = Input(4, 6, name="x"), Input(4, name="mask", external="mask")
    attention = Attention(2, name="attention").link(x, mask)
    network = Network(Architecture([x, mask, attention]) + SquaredDifference())
    network.initialise(handler)
    rng = numpy.random.default_rng(0)
    tokens = rng.standard_normal((1, 4, 6))
    changed = tokens.copy()
    changed[0, 3] += 5.0  # a padding position's values: no other position may see them

    def run(values):
        with handler.no_grad():
            externals = {"inputs": handler.asarray(values), "mask": handler.asarray(numpy.array([[1, 1, 1, 0.0]]))}
            return network.forward(externals).outputs["predictions"].to_numpy()

    numpy.testing.assert_array_equal(run(changed)[0, :3], run(tokens)[0, :3])


def test_embedding_gradients_on_every_handler_with_token_ids():
    """The table's gradient scatters into the rows the ids use (a repeated id adds up), the rest stay 0."""
    ids = numpy.array([[4, 0, 4], [1, 2, 4]])
    outputs = check_layer("embedding", input_shapes=[(3,)], inputs=[ids], vocabulary=6, size=2)
    assert all(out.shape == (2, 3, 2) for out in outputs.values())


def test_embedding_and_positional_pick_rows_and_add_positions():
    """What the two tables compute, row by row (their gradients: check_layer above and the conformance kit)."""
    handler = NumpyHandler("float64", seed=0)
    network = Network(Input(3) + Embedding(5, 2, name="embedding") + Positional(4, name="positional")
                      + SquaredDifference())
    network.initialise(handler)
    table, positions = (network.parameters[f"{n}.weights"].to_numpy() for n in ("embedding", "positional"))
    ids = numpy.array([[4, 0, 4], [1, 2, 3]])
    with handler.no_grad():
        out = network.forward({"inputs": handler.asarray(ids)}).outputs["predictions"].to_numpy()
    numpy.testing.assert_array_equal(out, table[ids] + positions[:3])


def test_token_norm_normalises_each_position():
    handler = NumpyHandler("float64", seed=0)
    network = Network(Input(3, 8) + TokenNorm(name="norm") + SquaredDifference())
    network.initialise(handler)
    x = numpy.random.default_rng(1).standard_normal((2, 3, 8)) * 4 + 2
    with handler.no_grad():
        out = network.forward({"inputs": handler.asarray(x)}).outputs["predictions"].to_numpy()
    expected = (x - x.mean(-1, keepdims=True)) / numpy.sqrt(x.var(-1, keepdims=True) + 1e-5)
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_gpt_construct_has_nanogpts_parameter_count():
    """The Python GPT is the example's network: 4 blocks of 12·C² + 13·C, tables and the output layer."""
    vocabulary, context, width = 128, 64, 128
    network = Network(GPT(vocabulary, context, width, heads=4, layers=4))
    blocks = 4 * (12 * width * width + 13 * width)
    assert network.parameter_count == blocks + (vocabulary + context) * width + 2 * width + (width + 1) * vocabulary


BAD_GEOMETRY = [
    ("block0-attention", {"heads": 3}, "layer 'block0-attention': width 128 is not divisible by heads = 3"),
    ("positional", {"context": 32}, "layer 'positional': sequences of 64 positions are longer than its table of "
                                    "context = 32"),
    ("embedding", {"vocabulary": 5}, "layer 'embedding': embedding: token id 9 is outside the vocabulary 0..4"),
]


@pytest.mark.parametrize("layer, changes, message", BAD_GEOMETRY, ids=["heads", "context", "vocabulary"])
def test_bad_geometry_is_one_line_naming_the_layer_and_exit_2(tmp_path, capsys, example_run, text_file, layer, changes,
                                                              message):
    run = example_run(tmp_path, text_file(tmp_path / "text.txt"), layer, **changes)
    assert cli_main(["train", str(run), "--quiet", "--handler", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # the run's own log lines, then the error
    assert [line for line in err if line.startswith("error:")] == err[-1:] and message in err[-1], err


def test_sigma_plugins_lists_what_this_distribution_registers(capsys):
    assert cli_main(["plugins", "--json"]) == 0
    rows = {(row["kind"], row["name"]): row for row in json.loads(capsys.readouterr().out)}
    for key in [("layer", n) for n in ("embedding", "positional", "attention", "token_norm", "tied_logits")] + [
            ("op", n) for n in ("embedding", "gelu", "attention", "squared_norm")] + [
            ("activation", "gelu"), ("activation", "gelu_tanh"), ("optimiser", "adamw"), ("hook", "warm_up_cosine")]:
        assert rows[key]["distribution"] == "sigmann-attention", key

"""Weight tying through the core's seam (``Layer.shared_parameters``): the GPT's output layer uses the embedding's
table, which the network makes, counts and saves once; a share that cannot be is one line naming the layer.
Training step by step against PyTorch: test_gpt_torch.py; resuming: test_example.py; ONNX: test_onnx.py."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import ArchitectureError, Input, Network, NumpyHandler, SoftmaxCE, cli_main
from sigmann_attention import GPT, Embedding, TiedLogits, TokenNorm

VOCABULARY, CONTEXT, WIDTH = 11, 6, 8


def test_the_tied_table_is_one_parameter_counted_once():
    tied, untied = (Network(GPT(VOCABULARY, CONTEXT, WIDTH, 2, 2, tie_weights=t)) for t in (True, False))
    tied.initialise(NumpyHandler("float64", seed=0))
    assert not [pid for pid in tied.parameters if pid.startswith("logits.")]
    assert tied.parameter_count == untied.parameter_count - (WIDTH + 1) * VOCABULARY
    assert sum(a.to_numpy().size for a in tied.parameters.values()) == tied.parameter_count
    assert set(tied.state_dict()) == set(tied.parameters)
    rows = {line.split()[0]: line.split()[-1] for line in tied.summary().splitlines()[2:]}
    assert rows["logits"] == "0" and rows["embedding"] == f"{VOCABULARY * WIDTH:,}"


def test_the_output_layer_computes_with_the_embeddings_table_as_it_is_now():
    """Both layers hold the one array: a change to the table (an optimiser's step, a loaded checkpoint) reaches
    the logits."""
    handler = NumpyHandler("float64", seed=0)
    network = Network(Input(3) + Embedding(VOCABULARY, WIDTH, name="embedding")
                      + TiedLogits(VOCABULARY, name="logits") + SoftmaxCE())
    network.initialise(handler)
    table = numpy.random.default_rng(1).standard_normal((VOCABULARY, WIDTH))
    network.load_state_dict({"embedding.weights": table})
    ids = numpy.array([[1, 4, 10]])
    logits = network.predict(ids)
    numpy.testing.assert_allclose(logits, table[ids] @ table.T, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("arguments, message", [
    ({"vocabulary": VOCABULARY + 1}, "layer 'logits': its parameter 'weights' (12, 8) cannot share "
                                     "'embedding.weights' ((11, 8))"),
    ({"vocabulary": VOCABULARY, "embedding": "table"}, "layer 'logits': its parameter 'weights' (11, 8) cannot "
                                                       "share 'table.weights' (no such parameter)"),
], ids=["shape", "owner"])
def test_a_share_that_cannot_be_is_one_line_naming_the_layer(arguments, message):
    architecture = (Input(3) + Embedding(VOCABULARY, WIDTH, name="embedding") + TokenNorm(name="norm")
                    + TiedLogits(name="logits", **arguments) + SoftmaxCE())
    with pytest.raises(ArchitectureError) as error:
        Network(architecture)
    assert str(error.value) == message


def test_sigma_train_stops_a_tied_vocabulary_unlike_the_embeddings_with_exit_2(tmp_path, capsys, example_run,
                                                                                text_file):
    run = example_run(tmp_path, text_file(tmp_path / "text.txt"), "logits", tied=True, vocabulary=100)
    assert cli_main(["train", str(run), "--quiet", "--handler", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [line for line in err if line.startswith("error:")] == err[-1:]
    assert "layer 'logits': its parameter 'weights' (100, 128) cannot share 'embedding.weights'" in err[-1], err


def test_a_pattern_naming_the_tied_parameter_under_its_borrower_matches_nothing_and_says_so(tmp_path, capsys,
                                                                                             example_run, text_file):
    """The table is the embedding's: ``logits.weights`` is no parameter id of a tied network, so freezing it would
    freeze nothing; the run stops before training with one line instead."""
    run = example_run(tmp_path, text_file(tmp_path / "text.txt"), tied=True)
    assert cli_main(["train", str(run), "--quiet", "--handler", "numpy",
                     "--set", "optimiser.freeze=logits.weights"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "optimiser.freeze" in err[-1] and "logits.weights" in err[-1], err

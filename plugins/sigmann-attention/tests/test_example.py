"""examples/gpt_chars.toml as users run it, on a small text: ``sigma train`` trains it and reports bits per
character, ``sigma sample`` continues a prompt from its checkpoint, and a resumed run ends where one that did
not stop ends."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import cli_main, load_checkpoint


@pytest.fixture
def text(tmp_path, text_file):
    return text_file(tmp_path / "text.txt", size=1000)  # 15 windows of 64: 2 steps of 12 an epoch


def train(run, *options):
    return cli_main(["train", str(run), "--handler", "numpy", *options])


def test_example_trains_reports_bits_per_character_and_samples(tmp_path, text, example_run, capsys, caplog):
    run = example_run(tmp_path, text)
    with caplog.at_level("INFO"):
        assert train(run) == 0
    assert "bits per character: train" in caplog.text
    (checkpoint,) = (tmp_path / "checkpoints").glob("gpt_chars-e1-*.ckpt")
    capsys.readouterr()
    assert cli_main(["sample", str(checkpoint), "--length", "12", "--temperature", "0.8", "--seed", "1",
                     "--prime", "ab c", "--handler", "numpy"]) == 0
    sample = capsys.readouterr().out
    assert sample.startswith("ab c") and len(sample) == 4 + 12 + 1 and set(sample[:-1]) <= set("abcdefgh \n")
    assert cli_main(["sample", str(checkpoint), "--length", "12", "--temperature", "0.8", "--seed", "1",
                     "--prime", "ab c", "--handler", "numpy"]) == 0
    assert capsys.readouterr().out == sample  # the same seed, the same text


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path, text, example_run, tied):
    """Tied: the checkpoint holds the embedding's table once, and it resumes exactly all the same."""
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert train(example_run(straight, text, tied=tied), "--set", "training.epochs=2", "--quiet") == 0
    run = example_run(halves, text, tied=tied)
    assert train(run, "--quiet") == 0
    (first,) = (halves / "checkpoints").glob("gpt_chars-e1-*.ckpt")
    assert train(run, "--set", "training.epochs=2", "--resume", str(first), "--quiet") == 0
    (a,), (b,) = ((d / "checkpoints").glob("gpt_chars-e2-*.ckpt") for d in (straight, halves))
    ours, theirs = load_checkpoint(a), load_checkpoint(b)
    assert ("logits.weights" in ours.parameters) is not tied and "embedding.weights" in ours.parameters
    for pid, value in ours.parameters.items():
        numpy.testing.assert_array_equal(value, theirs.parameters[pid], err_msg=pid)
    assert ours.optimiser["steps"] == theirs.optimiser["steps"] == 4


def test_the_threads_operator_trains_it(tmp_path, text, example_run):
    """Two data-parallel workers (sigmann-threads): their gradients merged, one AdamW step on them."""
    run = example_run(tmp_path, text)
    assert train(run, "--set", "operator.type=threads", "--set", "operator.workers=2", "--quiet") == 0
    (checkpoint,) = (tmp_path / "checkpoints").glob("gpt_chars-e1-*.ckpt")
    assert load_checkpoint(checkpoint).optimiser["steps"] == 2

"""examples/gpt_chars.toml as users run it, on a small text: ``sigma train`` trains it and reports bits per
character, ``sigma sample`` continues a prompt from its checkpoint, a resumed run ends where one that did not stop
ends, the threads and ray operators train it, and ``sigma summary`` and the dashboard show it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import tomllib

import httpx
import numpy
import pytest
from sigmann_web.hook import WebHook

from sigma_core import Loop, build_run, cli_main, load_checkpoint
from sigma_core import config as run_config


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


def test_the_ray_operator_trains_it(tmp_path, text, example_run):
    """Two Ray actors on a local instance (sigmann-ray), each building the GPT from the run's config: the plugin's
    layers, ops and AdamW reach the workers by name, as a run file's do. In a ``sigma`` process of its own, as a
    user runs it: the local Ray instance ends with it instead of staying up in this test worker."""
    run = example_run(tmp_path, text)
    done = subprocess.run([sys.executable, "-m", "sigma_core", "train", str(run), "--handler", "numpy", "--quiet",
                           "--set", "operator.type=ray", "--set", "operator.workers=2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (checkpoint,) = (tmp_path / "checkpoints").glob("gpt_chars-e1-*.ckpt")
    assert load_checkpoint(checkpoint).optimiser["steps"] == 2


@pytest.mark.parametrize("tied, total", [(False, 834_432), (True, 817_920)], ids=["untied", "tied"])
def test_sigma_summary_shows_it_from_the_run_file_and_the_checkpoint(tmp_path, text, example_run, capsys, tied,
                                                                     total):
    """The table a user reads before training and after: every block's layers, and the parameters counted once
    (tied: the embedding's table, not a second copy in the logits)."""
    run = example_run(tmp_path, text, tied=tied)
    assert cli_main(["summary", str(run)]) == 0
    before = capsys.readouterr().out
    assert train(run, "--quiet") == 0
    (checkpoint,) = (tmp_path / "checkpoints").glob("gpt_chars-e1-*.ckpt")
    capsys.readouterr()
    assert cli_main(["summary", str(checkpoint)]) == 0
    after = capsys.readouterr().out
    for table in (before, after):
        assert all(f"block{i}-attention" in table for i in range(4)) and "positional" in table, table
        assert f"{total:,}" in table, table
    assert after.startswith(before.rstrip("\n"))  # the same network, then what the checkpoint adds


def test_the_dashboard_shows_it(tmp_path, text, example_run):
    """sigmann-web's run panel on a live tied GPT: every layer, the parameters counted once."""
    raw = tomllib.loads(example_run(tmp_path, text, tied=True).read_text())
    raw["handler"] = {"name": "numpy", "dtype": "float32"}
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hook = WebHook(port=port, paused=True)  # held before its first step while the panel is read
    loop = Loop(run.trainer, epochs=1, hooks=[hook])
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while hook.server is None or hook.board.name not in hook.server.boards:
            assert time.monotonic() < deadline, "the web hook did not start"
            time.sleep(0.02)
        with httpx.Client(base_url=hook.server.url(with_token=False).rstrip("/"), timeout=20) as client:
            network = client.get("/api/state").json()["info"]["network"]
    finally:
        loop.signal_stop()
        loop.join(30)
        hook.server.stop()
    layers = {layer["name"]: layer for layer in network["layers"]}
    assert network["parameters"] == sum(layer["count"] for layer in layers.values()) == 817_920
    assert {"embedding", "positional", "block3-attention", "logits"} <= set(layers)
    assert layers["logits"]["count"] == 0 and layers["embedding"]["count"] == 128 * 128

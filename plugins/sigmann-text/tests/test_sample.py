"""examples/chars.toml end to end, bits per character, and ``sigma sample`` from its checkpoint."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pytest
from sigmann_testing import default_ctrl_c

from sigma_core import load_checkpoint
from sigma_core.cli import main
from sigma_core.model.inference import load
from sigmann_text.chars import build_vocabulary, encode

ROOT = Path(__file__).resolve().parents[3]
WORDS = "the cat sat on the mat and the dog ran to the log".split()


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The example trained for 3 epochs on a generated text: (checkpoint, text path, summary, log lines)."""
    root = tmp_path_factory.mktemp("chars")
    rng = np.random.default_rng(0)
    text = root / "input.txt"
    text.write_text(" ".join(rng.choice(WORDS, 2500)) + "\n", encoding="utf-8")
    lines, logger = Lines(), logging.getLogger("sigma")
    logger.addHandler(lines)
    try:
        assert main(["train", str(ROOT / "examples" / "chars.toml"), "--quiet", "--out", str(root / "out.json"),
                     "--handler", "cpu", "--set", f"data.path={text}", "--set", "training.epochs=3",
                     "--set", f"checkpoint.directory={root / 'checkpoints'}"]) == 0
    finally:
        logger.removeHandler(lines)
    checkpoint = max((root / "checkpoints").glob("*.ckpt"))
    return checkpoint, text, json.loads((root / "out.json").read_text()), lines.lines


def sample(capsys, *arguments):
    code = main(["sample", *map(str, arguments), "--handler", "cpu"])
    out, err = capsys.readouterr()
    return code, out, err


def test_example_reports_cost_in_bits_per_character(trained):
    _, _, summary, lines = trained
    pattern = r"epoch (\d+): bits per character: train ([\d.]+), validation ([\d.]+)"
    reports = [r for r in (re.search(pattern, line) for line in lines) if r]
    assert [int(r[1]) for r in reports] == [1, 2, 3]
    assert float(reports[-1][2]) == pytest.approx(summary["cost"] / math.log(2), abs=1e-4)
    validation = [float(r[3]) for r in reports]
    # below the 4.3 bits of guessing uniformly among the text's 20 characters: it has learnt something
    assert validation[-1] < validation[0] and validation[-1] < math.log2(len(build_vocabulary(trained[1])))


def test_sampling_is_reproducible_from_the_seed(trained, capsys):
    checkpoint = trained[0]
    first = sample(capsys, checkpoint, "--length", 60, "--seed", 5)
    assert first[0] == 0 and len(first[1]) == 1 + 60 + 1  # a random first character, 60 more, a newline
    assert sample(capsys, checkpoint, "--length", 60, "--seed", 5) == first
    assert sample(capsys, checkpoint, "--length", 60, "--seed", 6)[1] != first[1]
    primed = sample(capsys, checkpoint, "--length", 10, "--seed", 5, "--prime", "the cat ")[1]
    assert primed.startswith("the cat ") and len(primed) == 8 + 10 + 1


def test_temperature_towards_zero_is_greedy(trained, capsys):
    checkpoint, text = trained[:2]
    prime = text.read_text()[:60]  # longer than the network's 50-step window
    greedy = sample(capsys, checkpoint, "--length", 30, "--temperature", 0, "--prime", prime)[1]
    for seed in (1, 2):
        near_zero = sample(capsys, checkpoint, "--length", 30, "--temperature", 1e-9, "--seed", seed, "--prime", prime)
        assert near_zero[1] == greedy
    # the first generated character is the argmax of the saved network (loaded independently) on the last 50
    symbols = build_vocabulary(text)
    logits = load(checkpoint, "numpy").predict(encode(prime[-50:], symbols, "utf-8", "prime")[None])
    assert greedy[60] == chr(symbols[int(logits[0, -1, : len(symbols)].argmax())])
    assert sample(capsys, checkpoint, "--length", 30, "--temperature", 3, "--seed", 1, "--prime", prime)[1] != greedy


def test_top_k_draws_among_the_k_most_likely_only(trained, capsys):
    """Top 1 at a high temperature is greedy whatever the seed; top 3 never draws what greedy ranks below third."""
    checkpoint, text = trained[:2]
    prime = text.read_text()[:60]
    greedy = sample(capsys, checkpoint, "--length", 20, "--temperature", 0, "--prime", prime)[1]
    for seed in (1, 2):
        assert sample(capsys, checkpoint, "--length", 20, "--temperature", 5, "--top-k", 1, "--seed", seed,
                      "--prime", prime)[1] == greedy
    symbols = build_vocabulary(text)
    logits = load(checkpoint, "numpy").predict(encode(prime[-50:], symbols, "utf-8", "prime")[None])
    top3 = {chr(symbols[i]) for i in np.argsort(logits[0, -1, : len(symbols)])[-3:]}
    firsts = {sample(capsys, checkpoint, "--length", 1, "--temperature", 5, "--top-k", 3, "--seed", seed,
                     "--prime", prime)[1][60] for seed in range(12)}
    assert firsts <= top3 and len(firsts) > 1  # drawn, not greedy, and never outside the three
    assert sample(capsys, checkpoint, "--top-k", 0)[0] == 2  # one line: expected an integer >= 1


def test_the_run_file_finds_its_newest_checkpoint(trained, capsys, tmp_path):
    """``sigma sample examples/chars.toml``, as the README has it: the run's newest checkpoint, in the directory its
    [checkpoint] section names (where `sigma train` writes them)."""
    checkpoint = trained[0]
    run = (ROOT / "examples" / "chars.toml").read_text()
    assert 'directory = "checkpoints"' in run
    (tmp_path / "chars.toml").write_text(run.replace('directory = "checkpoints"',
                                                     f'directory = "{checkpoint.parent.as_posix()}"'))
    assert checkpoint.name == "chars-e3-i0.ckpt"  # the newest: 3 epochs
    assert sample(capsys, tmp_path / "chars.toml", "--length", 40, "--seed", 2) == \
        sample(capsys, checkpoint, "--length", 40, "--seed", 2)
    (tmp_path / "empty.toml").write_text(run.replace('directory = "checkpoints"',
                                                     f'directory = "{(tmp_path / "none").as_posix()}"'))
    code, out, err = sample(capsys, tmp_path / "empty.toml")
    assert code == 2 and err.splitlines()[-1] == (f"error: {tmp_path / 'empty.toml'}: no checkpoint of run 'chars' in "
                                                  f"{(tmp_path / 'none').as_posix()} yet (sigma train "
                                                  f"{tmp_path / 'empty.toml'} saves them there)")


def test_a_run_folder_gives_its_newest_checkpoint(trained, capsys, tmp_path):
    checkpoint = trained[0]  # root/checkpoints/chars-e3-i0.ckpt: the newest below root
    assert sample(capsys, checkpoint.parent.parent, "--length", 40, "--seed", 2) == \
        sample(capsys, checkpoint, "--length", 40, "--seed", 2)
    code, out, err = sample(capsys, tmp_path)
    assert (code, err) == (2, f"error: {tmp_path}: no checkpoint in this folder or below it\n")


@pytest.mark.parametrize("arguments, message", [
    (["--temperature", "-1"], "sigma sample: argument --temperature: expected a finite number >= 0, got '-1'"),
    (["--temperature", "nan"], "sigma sample: argument --temperature: expected a finite number >= 0, got 'nan'"),
    (["--temperature", "hot"], "sigma sample: argument --temperature: expected a finite number >= 0, got 'hot'"),
    (["--length", "-3"], "sigma sample: argument --length: expected an integer >= 0, got '-3'"),
    (["--seed", "-1"], "sigma sample: argument --seed: expected an integer >= 0, got '-1'"),
    (["--prime", "the Q"], "--prime: 'Q' (U+0051) at character 4 is not in the vocabulary"),
])
def test_bad_arguments_are_one_line_and_exit_2(trained, capsys, arguments, message):
    code, out, err = sample(capsys, trained[0], *arguments)
    errors = [line for line in err.splitlines() if not line.startswith("sigma: ")]
    assert code == 2 and out == "" and len(errors) == 1 and errors[0].startswith(f"error: {message}")


def test_bad_checkpoints_are_one_line_and_exit_2(trained, capsys, tmp_path):
    code, _, err = sample(capsys, tmp_path / "missing.ckpt")
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: ") and "missing.ckpt" in err
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint")
    code, _, err = sample(capsys, garbage)
    assert code == 2 and "garbage.ckpt" in err.strip().splitlines()[-1]
    assert main(["train", str(ROOT / "examples" / "xor.toml"), "--quiet", "--set", "training.epochs=1",
                 "--set", "checkpoint.every_epochs=1", "--set", f"checkpoint.directory={tmp_path}"]) == 0
    capsys.readouterr()
    code, _, err = sample(capsys, next(tmp_path.glob("xor*.ckpt")))
    assert code == 2 and "not a character model (its run's data.extractor is 'xor'" in err


@pytest.fixture
def unrecorded(monkeypatch):
    """Checkpoints load as those saved before ``chars`` recorded its vocabulary in the run config."""
    import sigma_core

    real = sigma_core.load_checkpoint

    def load_without_vocabulary(path):
        checkpoint = real(path)
        checkpoint.metadata["config"]["data"].pop("vocabulary")
        return checkpoint

    monkeypatch.setattr(sigma_core, "load_checkpoint", load_without_vocabulary)


def test_the_checkpoint_records_the_vocabulary_so_the_text_can_go(trained, capsys, tmp_path):
    checkpoint, text = trained[:2]
    vocabulary = "".join(map(chr, build_vocabulary(text)))
    assert load_checkpoint(checkpoint).config["data"]["vocabulary"] == vocabulary  # found in the text, not given
    expected = sample(capsys, checkpoint, "--length", 20, "--seed", 3)
    assert expected[0] == 0
    other, same = tmp_path / "other.txt", tmp_path / "same.txt"
    other.write_text("the cat sat on the mat?\n", encoding="utf-8")  # '?' is not in the training text
    same.write_text(vocabulary + "\n", encoding="utf-8")
    text.rename(tmp_path / "gone.txt")
    try:
        assert sample(capsys, checkpoint, "--length", 20, "--seed", 3) == expected
        code, out, err = sample(capsys, checkpoint, "--length", 5, "--text", other)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert err.strip() == (f"error: --text {other}: its vocabulary (12 symbols) is not the run's "
                               f"({len(vocabulary)}): '?' (U+003F) is not in the run's; sampling would map the "
                               "network's classes to other characters")
        assert sample(capsys, checkpoint, "--length", 20, "--seed", 3, "--text", same) == expected
    finally:
        (tmp_path / "gone.txt").rename(text)


def test_a_moved_training_text_is_named_and_can_be_given(trained, capsys, tmp_path, unrecorded):
    checkpoint, text = trained[:2]
    moved = tmp_path / "moved.txt"
    moved.write_bytes(text.read_bytes())
    text.rename(tmp_path / "elsewhere.txt")
    try:
        code, _, err = sample(capsys, checkpoint, "--length", 5)
        assert code == 2 and "give it with --text FILE" in err
        assert sample(capsys, checkpoint, "--length", 5, "--seed", 1, "--text", moved)[0] == 0
    finally:
        (tmp_path / "elsewhere.txt").rename(text)


def test_a_text_of_another_vocabulary_is_refused(trained, capsys, tmp_path, unrecorded):
    checkpoint, text = trained[:2]
    other = tmp_path / "other.txt"
    other.write_text(text.read_text().replace("g", "G"), encoding="utf-8")  # one symbol swapped for another
    code, out, err = sample(capsys, checkpoint, "--length", 5, "--text", other)
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == (
        f"error: --text {other}: its vocabulary (15 symbols) is not the run's (15): 'G' (U+0047) is not in the run's; "
        "sampling would map the network's classes to other characters")
    text.rename(tmp_path / "gone.txt")  # without the training text, only the network's classes are known
    try:
        huge = tmp_path / "huge.txt"
        huge.write_text("".join(map(chr, range(0x100, 0x100 + 200))), encoding="utf-8")
        code, out, err = sample(capsys, checkpoint, "--length", 5, "--text", huge)
        assert code == 2 and out == ""
        assert err.splitlines()[-1] == (f"error: {huge}: 200 symbols, more than the 128 classes of the network: "
                                        "not the text it was trained on")
    finally:
        (tmp_path / "gone.txt").rename(text)


def test_sample_streams_so_ctrl_c_keeps_what_was_generated(trained, tmp_path):
    """The characters reach stdout as they come: interrupted, sigma sample has printed them, and ends the line."""
    import signal
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "sigma_core", "sample", str(trained[0]), "--length", "100000",
                              "--seed", "1", "--handler", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=default_ctrl_c)  # Ctrl-C even under nohup
    try:
        first = child.stdout.read(10)  # arrives long before the 100,000 characters are done
        child.send_signal(signal.SIGINT)
        rest, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130 and err.decode().splitlines()[-1] == "interrupted"
    printed = (first + rest).decode()
    assert len(printed) > 10 and printed.endswith("\n") and len(printed) < 100_000
    assert printed[:-1] == sample_text(trained[0], len(printed) - 2)  # what a whole run prints, so far


def sample_text(checkpoint, length):
    from sigmann_text.sample import Sampler

    return Sampler(checkpoint, handler="cpu").sample(length, 1.0, seed=1)

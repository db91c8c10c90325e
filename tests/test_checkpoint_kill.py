"""The crash test: SIGKILL ``sigma train`` mid-epoch, resume from its last checkpoint, match an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy

from sigma_core.training.checkpoint import checkpoints, latest_checkpoint, load_checkpoint
from sigma_core.cli import main

ROOT = Path(__file__).resolve().parent.parent
DIGITS = ROOT / "examples" / "digits.toml"  # dropout and Adam: RNG and optimiser memory must both survive
EPOCHS = 4


def train_argv(directory: Path, *extra: str) -> list[str]:
    """Checkpoints every 7 iterations (so mid-epoch: 45 batches an epoch) and after the last epoch."""
    return ["train", str(DIGITS), "--quiet", "--handler", "numpy", "--set", f"training.epochs={EPOCHS}",
            "--set", f"checkpoint.directory={json.dumps(str(directory))}", "--set", "checkpoint.every_iterations=7",
            "--set", f"checkpoint.every_epochs={EPOCHS}", *extra]


def sigma(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sigma_core", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(tmp_path, capsys):
    crashed = tmp_path / "crashed"
    victim = sigma(*train_argv(crashed))
    try:
        while not list(crashed.glob("*.ckpt")) and victim.poll() is None:
            time.sleep(0.002)
        victim.send_signal(signal.SIGKILL)
    finally:
        _, err = victim.communicate()
    assert victim.returncode == -signal.SIGKILL, f"training ended before it could be killed:\n{err}"

    for path in checkpoints(crashed, "digits"):  # atomic writes: whatever is there is whole
        load_checkpoint(path)
    last = latest_checkpoint(crashed, "digits")
    state = load_checkpoint(last).trainer
    assert state["in_epoch"] and 0 < state["iteration"] and state["epoch"] < EPOCHS, state

    resumed = sigma(*train_argv(crashed, "--resume", str(last)))
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err

    reference = tmp_path / "reference"
    assert main(train_argv(reference)) == 0
    capsys.readouterr()

    final_name = f"digits-e{EPOCHS}-i0.ckpt"
    got, expected = load_checkpoint(crashed / final_name), load_checkpoint(reference / final_name)
    assert got.parameters.keys() == expected.parameters.keys()
    for pid, value in expected.parameters.items():
        assert numpy.array_equal(got.parameters[pid], value), pid
    for pid, buffers in expected.optimiser["memory"].items():
        for name, value in buffers.items():
            assert numpy.array_equal(got.optimiser["memory"][pid][name], value), (pid, name)
    assert got.trainer == expected.trainer  # counters, last cost, iterator positions, RNG state

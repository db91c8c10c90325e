"""``sigma summary``: the network of a run file, a checkpoint, a run folder's newest checkpoint or an export."""

from __future__ import annotations

import re
from pathlib import Path

from sigma_core.cli import main

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits.toml"


def sigma(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_summary_command_lists_layers_shapes_parameters_and_total(capsys):
    status, out, _ = sigma(capsys, "summary", DIGITS, "--set", "network.layers.1.size=64")
    assert status == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows[0] == ["layer", "type", "output", "shape", "parameters"]
    assert rows[2] == ["2-dense", "Dense", "(64,)", "4,160"]  # 64 * 64 + 64
    assert rows[-1] == ["total", "4,810"]


def test_summary_of_a_run_folder_reads_its_newest_checkpoint_with_fitted_values_epochs_and_accuracy(
        capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, _ = sigma(capsys, "train", DIGITS, "--handler", "numpy", "--set", "training.epochs=2", "--quiet",
                           "--monitor", "metrics")
    accuracy = re.search(r"held-out accuracy (\S+)$", out.strip())[1]
    status, out, _ = sigma(capsys, "summary", "runs/digits")
    assert status == 0 and "2-dense" in out
    fitted, trained = out.splitlines()[-2:]
    assert fitted.endswith('normalise {"range": [0, 1], "input_range": [0.0, 16.0]}'), fitted
    assert trained == (f"{Path('runs/digits/version_0/checkpoints/digits-e2-i0.ckpt')}: 2 epochs trained; then "
                       f"validation.accuracy {accuracy} ({tmp_path / 'runs/digits/version_0/metrics.jsonl'})")
    (tmp_path / "empty").mkdir()
    status, out, err = sigma(capsys, "summary", "empty")
    assert (status, err) == (2, "error: empty: no checkpoint in this folder or below it\n")

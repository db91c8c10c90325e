"""Issue 15 item 2: the network summary, --resume last/DIR, --set on list entries, --version, python -m sigma_core,
the MNIST example's data source and the README's resume example as written."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import sigma_core
from sigma_core import config
from sigma_core.cli import main
from sigma_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits.toml"


def sigma(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_set_addresses_list_entries_and_names_a_bad_index():
    cfg = config.load(DIGITS, ["network.layers.1.size=64", "network.layers.2.p=0.3"])
    assert cfg["network"]["layers"][1] == {"type": "dense", "size": 64, "activation": "relu"}
    assert cfg["network"]["layers"][2]["p"] == 0.3
    with pytest.raises(ConfigError, match=r"network.layers is a list of 5; '7' is not an index 0..4"):
        config.load(DIGITS, ["network.layers.7.size=64"])
    with pytest.raises(ConfigError, match="training.epochs is not a table or a list"):
        config.load(DIGITS, ["training.epochs.x=1"])


def test_summary_command_lists_layers_shapes_parameters_and_total(capsys):
    status, out, _ = sigma(capsys, "summary", DIGITS, "--set", "network.layers.1.size=64")
    assert status == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows[0] == ["layer", "type", "output", "shape", "parameters"]
    assert rows[2] == ["2-dense", "Dense", "(64,)", "4,160"]  # 64 * 64 + 64
    assert rows[-1] == ["total", "4,810"]


def test_train_prints_the_summary_on_stderr_unless_quiet(capsys, tmp_path):
    args = ("train", DIGITS, "--handler", "numpy", "--set", "training.epochs=1", "--set", "name=one")
    status, out, err = sigma(capsys, *args)
    assert status == 0 and "total" in err and "8,320" in err
    assert out.count("\n") == 1 and out.startswith("one: 1 epoch in ")  # singular, and stdout is the result alone
    status, out, err = sigma(capsys, *args, "--quiet")
    assert status == 0 and "total" not in err


def test_resume_last_and_dir_pick_the_newest_valid_checkpoint(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = ("train", DIGITS, "--handler", "numpy", "--quiet")
    assert sigma(capsys, *base, "--set", "training.epochs=2", "--set", "checkpoint.every_epochs=1")[0] == 0
    status, out, _ = sigma(capsys, *base, "--set", "training.epochs=3", "--resume", "last")
    assert status == 0 and out.startswith("digits: 1 epoch (of 3 in all) in ")
    (tmp_path / "checkpoints" / "digits-e9-i0.ckpt").write_bytes(b"not a zip")  # the newest, but damaged
    status, out, err = sigma(capsys, *base, "--set", "training.epochs=5", "--resume", "checkpoints")
    assert status == 0 and out.startswith("digits: 3 epochs (of 5 in all) in ")
    assert "skipping checkpoint checkpoints/digits-e9-i0.ckpt: truncated or corrupted" in err
    status, _, err = sigma(capsys, *base, "--resume", tmp_path / "empty")
    assert status == 2 and "checkpoint" in err and "no such file" in err
    (tmp_path / "empty").mkdir()
    status, _, err = sigma(capsys, *base, "--resume", tmp_path / "empty")
    assert status == 2 and f"no valid checkpoint of run 'digits' in {tmp_path / 'empty'}" in err


def test_version_and_python_dash_m(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"sigma {sigma_core.__version__}\n"
    done = subprocess.run([sys.executable, "-m", "sigma_core", "summary", str(DIGITS)], capture_output=True, text=True)
    assert done.returncode == 0 and "9,610" in done.stdout


def test_mnist_example_takes_its_data_from_the_mnist_plugin():
    from sigma_core import plugins

    data = tomllib.loads((ROOT / "examples" / "mnist.toml").read_text())["data"]
    assert data["source"] == "mnist" and "directory" not in data  # found or downloaded by the extractor
    assert plugins.get("extractor", "mnist").distribution == "sigmann-mnist"


def test_readme_resume_example_runs_as_written(capsys, tmp_path, monkeypatch):
    block = next(b for b in re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
                 if "--resume last" in b)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for line in block.splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "sigma"
        status, out, err = sigma(capsys, *argv[1:])
        assert status == 0, err
    assert out.lstrip().startswith("{") and '"accuracy": 0.9' in out

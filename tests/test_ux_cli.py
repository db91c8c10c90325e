"""Issue 15 item 2: --resume last/DIR, --set on list entries, --version, python -m sigma_core,
the MNIST example's data source and the resume example (docs/checkpoints.md) as written."""

from __future__ import annotations

import json
import os
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
    done = subprocess.run([sys.executable, "-m", "sigma_core", "plugins"], capture_output=True, text=True)
    assert done.returncode == 0 and "sigmann" in done.stdout


def test_mnist_example_takes_its_data_from_the_mnist_plugin():
    from sigma_core import plugins

    data = tomllib.loads((ROOT / "examples" / "mnist.toml").read_text())["data"]
    assert data["extractor"] == "mnist" and "directory" not in data  # found or downloaded by the extractor
    assert plugins.get("extractor", "mnist").distribution == "sigmann-mnist"


def test_readme_resume_example_runs_as_written(capsys, tmp_path, monkeypatch):
    block = next(b for b in re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "checkpoints.md").read_text(),
                                     flags=re.S) if "--resume last" in b)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for line in block.splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "sigma"
        status, out, err = sigma(capsys, *argv[1:])
        assert status == 0, err
    assert out.lstrip().startswith("{") and '"accuracy": 0.9' in out


# -- issue 24: every writer and every reader of a user's file: one line naming it, exit 2, nothing lost -------------

METRICS = [{"time": 1.0, "event": "iteration", "step": 1, "epoch": 1, "iteration": 1, "cost": 0.9, "learning_rate": 0.1},
           {"time": 2.0, "event": "epoch", "step": 2, "epoch": 1, "iteration": 2, "cost": 0.8, "learning_rate": 0.1,
            "validation.accuracy": 0.5, "validation.cost": 0.7}]


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("sigma: ")]


def run_directory(tmp_path, lines, name="run") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "metrics.jsonl").write_bytes(b"".join(
        line if isinstance(line, bytes) else (json.dumps(line) + "\n").encode() for line in lines))
    return directory


@pytest.mark.parametrize("lines, message", [
    ([bytes(range(256)) * 4], "{file}: no metrics records in it"),  # binary garbage
    ([METRICS[0], "x".encode(), b'{"time": 3, "event": "ep'], None),  # lines cut short are skipped
    ([METRICS[0], {**METRICS[1], "cost": "0.8"}], "{file} line 2: not a metrics record (cost: expected a number or "
                                                  "null, got '0.8')"),
    ([{key: value for key, value in METRICS[0].items() if key != "epoch"}],
     "{file} line 1: not a metrics record (epoch is missing)"),
    ([{**METRICS[0], "event": "lunch"}], "{file} line 1: not a metrics record (event: expected one of iteration, "
                                         "epoch, stop, got 'lunch')"),
    ([{**METRICS[0], "step": -1}], "{file} line 1: not a metrics record (step: expected an integer >= 0, got -1)"),
    ([{**METRICS[0], "learning_rate": True}], "{file} line 1: not a metrics record (learning_rate: expected a "
                                              "number or null, got True)"),
    ([[1, 2, 3], "[]".encode() + b"\n", b"5\n"], "{file}: no metrics records in it"),  # JSON, but not objects
])
@pytest.mark.parametrize("command", ["plot", "dashboard"])
def test_a_bad_metrics_file_is_one_line_for_plot_and_dashboard(capsys, tmp_path, monkeypatch, command, lines, message):
    directory = run_directory(tmp_path, [line if not isinstance(line, list) else json.dumps(line).encode() + b"\n"
                                         for line in lines])
    if message is None:  # readable: sigma plot draws it (the dashboard would serve it: not started here)
        if command == "plot":
            assert main(["plot", str(directory), "-o", str(tmp_path / "p.png")]) == 0
            assert (tmp_path / "p.png").stat().st_size > 0
        return
    monkeypatch.setattr("sigmann_web.server.Server.serve", lambda *a, **k: pytest.fail("served a bad file"))
    status, out, err = sigma(capsys, command, directory)
    assert (status, out, errors(err)) == (2, "", [f"error: {message.format(file=directory / 'metrics.jsonl')}"])


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("command", ["plot", "dashboard"])
def test_a_metrics_file_that_is_a_fifo_or_a_device_is_one_line_not_a_hang(capsys, tmp_path, monkeypatch, command, kind):
    path = tmp_path / "metrics.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    monkeypatch.setattr("sigmann_web.server.Server.serve", lambda *a, **k: pytest.fail("served a bad file"))
    status, out, err = sigma(capsys, command, path)
    reason = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert (status, out, errors(err)) == (2, "", [f"error: metrics file {path}: cannot read it (it is {reason}, "
                                                  "not a regular file)"])


@pytest.mark.parametrize("make, reason", [
    (lambda tmp: (tmp / "folder").mkdir() or tmp / "folder", "it is a directory: name a file"),
    (lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "p.png", "{tmp}/file is a file, not a folder"),
    (lambda tmp: tmp / ("p" * 300 + ".png"), "its name is too long for the file system"),
])
def test_plot_to_an_unwritable_path_is_one_line(capsys, tmp_path, make, reason):
    directory = run_directory(tmp_path, METRICS)
    output = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    status, out, err = sigma(capsys, "plot", directory, "-o", output)
    assert (status, out, errors(err)) == (2, "", [f"error: -o {output}: cannot write it ({reason.format(tmp=tmp_path)})"])
    assert sorted(tmp_path.rglob("*")) == before


def test_plugin_new_into_an_unwritable_directory_is_one_line_and_writes_nothing(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    for directory, reason in ((tmp_path / "file", "it is a file, not a folder"),
                              (tmp_path / "file" / "sub", f"{tmp_path}/file is a file, not a folder")):
        status, out, err = sigma(capsys, "plugin", "new", "layer", "demo", "--directory", directory)
        assert (status, out, errors(err)) == (2, "", [f"error: --directory {directory}: cannot write there ({reason})"])
    name = "d" * 250  # a valid component name, but sigmann-ddd... is longer than a file name may be
    status, out, err = sigma(capsys, "plugin", "new", "layer", name, "--directory", tmp_path)
    target = tmp_path / f"sigmann-{name}"
    assert (status, out, errors(err)) == (2, "", [f"error: --directory {target}: cannot write there (its name is too "
                                                  "long for the file system)"])
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_run_directory_that_cannot_be_written_is_one_line(capsys, tmp_path):
    """The metrics hook cannot start: one line names the directory and why, and the run goes on without it."""
    (tmp_path / "file").write_text("x")
    status, out, err = sigma(capsys, "train", DIGITS, "--quiet", "--handler", "numpy", "--set", "training.epochs=1",
                             "--monitor", f"metrics:directory='{tmp_path / 'file'}'")
    assert status == 0 and out.startswith("digits: 1 epoch")
    [line] = [line for line in err.splitlines() if "'metrics' failed in" in line]
    assert f"run directory {tmp_path / 'file'}: cannot write there (it is a file, not a folder)" in line
    assert "sigma: hook that failed and was detached: 'metrics' (on_start)" in err.splitlines()  # again at the end


@pytest.mark.parametrize("error", [PermissionError(13, "Permission denied"), OSError(30, "Read-only file system"),
                                   OSError(28, "No space left on device")])
def test_the_file_system_refusing_a_write_is_one_line_naming_the_path(tmp_path, monkeypatch, error):
    """What root cannot be shown by chmod: the file system's own refusal, whichever step it comes at."""
    from sigma_core.atomic import WriteError, atomic_write, check_writable

    def refuse(*args, **kwargs):
        raise error

    with monkeypatch.context() as patch:
        patch.setattr("tempfile.TemporaryFile", refuse)
        with pytest.raises(WriteError) as refused:
            check_writable(tmp_path / "out.json", what="--out")
    assert str(refused.value) == f"--out {tmp_path / 'out.json'}: cannot write it ({error.strerror})"
    (tmp_path / "out.json").write_text("the previous result")
    with pytest.raises(WriteError) as refused:
        with atomic_write(tmp_path / "out.json", "w") as stream:
            stream.write("half")
            raise error  # as a write to a full disk does
    assert str(refused.value) == f"{tmp_path / 'out.json'}: cannot write it ({error.strerror})"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"] and (tmp_path / "out.json").read_text() == (
        "the previous result")

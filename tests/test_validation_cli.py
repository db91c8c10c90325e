"""Every bad run-file value is one ``error:`` line on stderr and exit status 2, before any data is read.

Issue 10 item 11 (and item 10's oversized layer): each case runs ``sigma train``
in-process on a small synthetic run with one ``--set`` override.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sigma_core import NumpyHandler, cli

from sigma_core.compute import memory
from sigma_core.errors import ArchitectureError
from sigma_core.model.network import Network
from sigma_core.model.constructs import Dense, Input

RUN_FILE = """
name = "probe"
seed = 0
[data]
extractor = "synthetic"
n = 100
shape = 4
classes = 3
[split]
validation = 0.2
[[network.layers]]
type = "input"
shape = [4]
[[network.layers]]
type = "dense"
size = 8
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[initialisers]
"*.weights" = { type = "gaussian", std = 0.1 }
[optimiser]
type = "momentum"
learning_rate = 0.1
[training]
epochs = 1
"""

LAYERS = '[{type="input",shape=[4]},{type="dense",size=%s},{type="softmax_ce"}]'


def sigma_train(tmp_path, capsys, *overrides, text=RUN_FILE):
    """Exit status and stderr lines of ``sigma train`` with ``--set`` overrides."""
    run_file = tmp_path / "run.toml"
    run_file.write_bytes(text.encode() if isinstance(text, str) else text)
    arguments = ["train", str(run_file), "--quiet"]
    for override in overrides:
        arguments += ["--set", override]
    status = cli.main(arguments)
    return status, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    "override, message",
    [
        ('optimiser.learning_rate="banana"', "optimiser.learning_rate: expected a finite number >= 0, got 'banana'"),
        ("optimiser.learning_rate=-0.5", "optimiser.learning_rate: expected a finite number >= 0, got -0.5"),
        ("optimiser.learning_rate=inf", "optimiser.learning_rate: expected a finite number >= 0, got inf"),
        ("optimiser.learning_rate=nan", "optimiser.learning_rate: expected a finite number >= 0, got nan"),
        ('optimiser.momentum="x"', "optimiser.momentum: expected a finite number >= 0, got 'x'"),
        ("network.layers=" + LAYERS % '"banana"', "network.layers[1] ('2-dense').size: expected an integer >= 1, got 'banana'"),
        ("network.layers=" + LAYERS % "2.7", "network.layers[1] ('2-dense').size: expected an integer >= 1, got 2.7"),
        ('network.layers=[{type="input",shape="64"}]',
         "network.layers[0] ('1-input').shape: expected a positive integer or an array of them, got '64'"),
        ('handler.dtype="banana"', "handler.dtype: expected one of float32, float64, got 'banana'"),
        ("seed=-1", "seed: expected an integer >= 0, got -1"),
        ("split.seed=-3", "split.seed: expected an integer >= 0, got -3"),
        ("data.seed=-1", "data.seed: expected an integer >= 0, got -1"),
        ('initialisers={"*.weights"={type="gaussian",std=-1}}',
         'initialisers."*.weights".std: expected a finite number >= 0, got -1'),
        ('optimiser.freeze=["*.bais"]', "optimiser.freeze: pattern '*.bais' matches no parameter"),
        ('initialisers={"*.wieghts"={type="he"}}', "initialisers: pattern '*.wieghts' matches no parameter"),
        ('hooks=[{type="stop",every=[-1,"epoch"]}]', "hooks[0].every: hook 'stop': every must be an integer >= 0"),
        ('hooks=[{type="epoch_iteration_reporter",every=[0,"epoch"]}]',  # the hook's own check, its key named
         "hooks[0].every: hook 'epoch_iteration_reporter': a cadence's interval must be an integer >= 1, got 0"),
        ("split.validation=[50,200]", "split.validation = [50, 200] is not within the 100 records of the data"),
        ("split.validation=[50,50]", "split.validation: the held-out set is empty (the data has 100 records)"),
        ("split.validation=[0,20]", "split.validation: the training set is empty (the data has 100 records)"),
        ('hooks=[{type="stop",priority="x"}]', "hooks[0].priority: hook 'stop' does not take 'priority'"),
        ('hooks=[{type="step_schedule",step=2}]',  # an older run file's: the component's alias, its key renamed
         "hooks[0].step: hook 'step_schedule' does not take 'step': a schedule's length is its period now"),
        ('network.layers=[{type="input",shape=[4],alias="x"}]',  # the older name of external
         ".alias: layer 'input' does not take 'alias': an input or output layer names its external array with"),
        ('hooks=[{type="accuracy_reporter",tops=["a"]}]', "hooks[0]: hook 'accuracy_reporter': invalid literal for int()"),
        ("network.layers=[1]", "network.layers[0] must be a table with a type"),
        ('network.layers=[{type="input",shape=[4],name=3}]', "network.layers[0].name: expected a string, got 3"),
        ("optimiser.type=3", "optimiser.type: expected a string, got 3"),
        ('data.one_hot="x"', "data.one_hot: expected an integer >= 1, got 'x'"),
        ("data.preprocess=[{shuffle=-1}]", "data.preprocess.shuffle: expected an integer >= 0, got -1"),
        ('training.last_batch="x"', "training.last_batch: expected one of keep, drop, got 'x'"),
        ("checkpoint.keep=0", "checkpoint.keep: expected an integer >= 1, got 0"),
        # a run's name names its checkpoints and lock file: one part of a path, or it would land elsewhere or fail
        ('name="../elsewhere"', "name: expected a name usable as a file name (not empty, not . or .., no / or"),
        ('name=""', "name: expected a name usable as a file name"),
        ('name="a\\u0000b"', "name: expected a name usable as a file name"),  # was a ValueError traceback
        ('checkpoint.directory="a\\u0000b"', "checkpoint.directory: expected a path (a string without control"),
        ("..seed=1", "--set ..seed: a key has an empty part"),
        ('network.layers=[{type="input",shape=[4]},{type="nope"}]',
         "network.layers[1] ('2-nope'): unknown layer 'nope' (available: "),
        ("optimiser={learning_rate=0.1}", "optimiser: an optimiser config needs a 'type' key"),
        ("network.layers=" + LAYERS % 10**12, "layer '2-dense': the float32 parameters up to this layer with their "
                                              "gradients and optimiser memory need 60,000,000,000,000 bytes"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_key(tmp_path, capsys, override, message):
    status, lines = sigma_train(tmp_path, capsys, override)
    assert status == 2
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert message in lines[0]


def test_a_run_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    status, lines = sigma_train(tmp_path, capsys, text=b'name = "caf\xe9"\n')
    assert status == 2
    assert lines == [f"error: {tmp_path / 'run.toml'}: not UTF-8 text (byte 0xe9 at offset 11)"]


def test_records_of_another_shape_are_refused_not_reshaped(tmp_path, capsys):
    """As in Keras, an input layer of shape [2, 2] refuses records of 4 values instead of reshaping them to fit."""
    status, lines = sigma_train(tmp_path, capsys, "network.layers.0.shape=[2,2]")
    assert status == 2 and lines[-1].startswith("error: ") and not any("Traceback" in line for line in lines)
    assert ("layer '1-input': input 'inputs' has shape (32, 4), expected (batch, 2, 2); records are never reshaped: "
            "set the input layer's shape to the data's, shape = [4]") in lines[-1]


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_run_file_that_is_not_a_regular_file_is_one_line_not_a_hang(tmp_path, capsys, kind):
    """A FIFO waits for a writer and /dev/zero never ends: reading either would hang, so neither is opened."""
    path = tmp_path / "run.toml"
    {"fifo": os.mkfifo, "device": lambda p: p.symlink_to("/dev/zero"), "directory": Path.mkdir}[kind](path)
    what = {"fifo": "a FIFO (named pipe)", "device": "a character device", "directory": "a directory"}[kind]
    assert cli.main(["train", str(path), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: run file {path}: cannot read it (it is {what}, not a regular file)"]


def test_arguments_are_checked_before_any_data_is_read(tmp_path, capsys):
    missing = tmp_path / "absent.csv"
    text = RUN_FILE.replace('extractor = "synthetic"\nn = 100\nshape = 4\nclasses = 3', f'extractor = "csv"\npath = "{missing}"')
    status, lines = sigma_train(tmp_path, capsys, "optimiser.learning_rate=-1", text=text)
    assert status == 2 and "optimiser.learning_rate" in lines[0]
    status, lines = sigma_train(tmp_path, capsys, text=text)  # the same run file does read the data
    assert status == 2 and "absent.csv" in lines[0]


def test_a_layer_too_big_for_memory_is_refused_before_allocating(monkeypatch):
    network = Network(Input(4) + Dense(10, name="wide") + Dense(5, name="next"))
    monkeypatch.setattr(memory, "available", lambda: 4 * 50)  # room for wide's 50 parameters, not for next's 55 more
    with pytest.raises(ArchitectureError, match=r"layer 'next': the float32 parameters up to this layer need 420 bytes, "
                                                r"more than the 200 bytes of memory available"):
        network.initialise(NumpyHandler("float32"))
    assert network.parameters == {}  # nothing was allocated

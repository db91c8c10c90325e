"""Layer state (``Layer.state_shapes``) through batch norm's running statistics: made by the network, moved in
training only, never trained or decayed, saved in checkpoints and restored bit for bit on resume, used by
evaluation and ``sigma predict``, and repeated by recorded steps (sigmann-replay)."""

from __future__ import annotations

import json
import tomllib

import numpy
import pytest

from sigma_core import build_run, cli_main, load, load_checkpoint, validate_run

RUN = """
name = "bn"
seed = 0
[handler]
name = "numpy"
dtype = "float64"
[data]
extractor = "synthetic"
n = 60
shape = [1, 6, 6]
classes = 3
[split]
validation = 0.2
[[network.layers]]
type = "input"
shape = [1, 6, 6]
[[network.layers]]
type = "conv2d"
name = "conv"
channels = 3
padding = "same"
activation = "relu"
[[network.layers]]
type = "batch_norm"
name = "bn"
momentum = 0.3
[[network.layers]]
type = "max_pool2d"
[[network.layers]]
type = "flatten"
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[optimiser]
type = "momentum"
learning_rate = 0.05
weight_decay = 0.1
[training]
batch_size = 16
epochs = 2
"""

STATE = ("bn.running_mean", "bn.running_var")


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """Runs write their run directories (runs/<name>/...) under the current directory: a temporary one here."""
    monkeypatch.chdir(tmp_path)


def run(tmp_path=None, **changes):
    raw = tomllib.loads(RUN)
    if tmp_path is not None:
        raw["checkpoint"] = {"directory": str(tmp_path), "every_epochs": 1, "every_iterations": 2, "keep": 100}
    for section, values in changes.items():
        raw[section].update(values)
    return build_run(validate_run(raw))


def test_running_statistics_move_in_training_only_and_are_never_trained():
    r = run()
    r.trainer.initialise(r.handler)
    network = r.trainer.network
    assert not set(STATE) & set(r.trainer.trainable_parameters)
    assert [network.state[key].to_numpy().tolist() for key in STATE] == [[0.0] * 3, [1.0] * 3]
    r.train()
    moved = {key: network.state[key].to_numpy() for key in STATE}
    assert not numpy.allclose(moved["bn.running_mean"], 0) and not numpy.allclose(moved["bn.running_var"], 1)
    assert not set(STATE) & set(r.trainer.optimiser.state_dict()["memory"])  # no momentum, no weight decay
    inputs = numpy.random.default_rng(0).standard_normal((10, 1, 6, 6))
    first = network.predict(inputs)
    assert numpy.array_equal(network.predict(inputs), first)  # evaluation reads the statistics, never moves them
    for key in STATE:
        assert numpy.array_equal(network.state[key].to_numpy(), moved[key])


def test_evaluation_normalises_with_the_running_statistics():
    r = run()
    r.train()
    network, handler = r.trainer.network, r.handler
    x = numpy.random.default_rng(1).standard_normal((4, 1, 6, 6))
    conv = network.layers["conv"]
    with handler.no_grad():
        h = conv.forward(handler, [handler.asarray(x)], {p: network.parameters[f"conv.{p}"] for p in ("weights", "biases")},
                         None).to_numpy()
    mean, var = (network.state[key].to_numpy().reshape(1, 3, 1, 1) for key in STATE)
    gamma, beta = (network.parameters[f"bn.{p}"].to_numpy().reshape(1, 3, 1, 1) for p in ("gamma", "beta"))
    expected = (h - mean) / numpy.sqrt(var + 1e-5) * gamma + beta
    expected = expected.reshape(4, 3, 3, 2, 3, 2).max(axis=(3, 5)).reshape(4, -1)
    logits = expected @ network.parameters["6-dense.weights"].to_numpy() + network.parameters["6-dense.biases"].to_numpy()
    numpy.testing.assert_allclose(network.predict(x), logits, rtol=1e-12, atol=1e-12)


def test_checkpoints_hold_the_statistics_and_resume_bit_for_bit(tmp_path):
    reference = run(tmp_path / "reference")
    reference.train()
    saved = load_checkpoint(tmp_path / "reference" / "bn-e2-i0.ckpt")
    for key in STATE:
        assert numpy.array_equal(saved.parameters[key], reference.trainer.network.state[key].to_numpy())
    resumed = run(tmp_path / "resumed")
    resumed.resume(tmp_path / "reference" / "bn-e0-i2.ckpt")  # mid-epoch: the statistics have moved twice
    resumed.train()
    ours, theirs = resumed.trainer.network.state_dict(), reference.trainer.network.state_dict()
    assert ours.keys() == theirs.keys() and set(STATE) <= set(ours)
    for key in ours:
        assert ours[key].tobytes() == theirs[key].tobytes(), key


def test_sigma_predict_uses_the_restored_statistics(tmp_path, capsys):
    r = run(tmp_path)
    r.train()
    inputs = numpy.random.default_rng(2).standard_normal((5, 1, 6, 6))
    numpy.save(tmp_path / "inputs.npy", inputs)
    checkpoint = tmp_path / "bn-e2-i0.ckpt"
    assert numpy.array_equal(load(checkpoint, "numpy").predict(inputs), r.trainer.network.predict(inputs))
    assert cli_main(["predict", str(checkpoint), str(tmp_path / "inputs.npy"), "--format", "json", "--top", "1",
                     "--handler", "numpy"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    flat = rows[0] if len(rows) == 1 and isinstance(rows[0], list) else rows
    assert [row["class"] for row in flat] == r.trainer.network.predict(inputs).argmax(axis=1).tolist()


@pytest.mark.parametrize("handler", ["numpy", "cpu"])
def test_recorded_steps_move_the_statistics_as_steps_run_as_written(handler):
    pytest.importorskip("sigmann_replay")
    from sigmann_replay import StepReplay

    runs = [run(handler={"name": handler, "dtype": "float32"}, training={"compile": mode}) for mode in ("none", "replay")]
    for r in runs:
        r.train()
    plain, replayed = (r.trainer.network.state_dict() for r in runs)
    assert StepReplay.of(runs[1].trainer).replayed > 0
    for key in plain:
        assert plain[key].tobytes() == replayed[key].tobytes(), key

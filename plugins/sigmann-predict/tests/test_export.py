"""``sigma export``: the exporter table (safetensors built in, other formats from plugins)."""

from __future__ import annotations

import numpy as np

import sigma_core
from sigma_core import plugins
from sigma_core.training.checkpoint import load_checkpoint
from sigma_core.cli import main

RUN = """
name = "graph"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 64
shape = [2, 3]
classes = 3
[[network.layers]]
type = "input"
shape = [2, 3]
[[network.layers]]
type = "elementwise"
name = "b"
activation = "sigmoid"
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[training]
batch_size = 16
epochs = 1
[checkpoint]
directory = "{directory}"
every_epochs = 1
"""


def checkpoint(tmp_path):
    (tmp_path / "run.toml").write_text(RUN.format(directory=tmp_path.as_posix()))
    assert main(["train", str(tmp_path / "run.toml"), "--quiet"]) == 0
    return tmp_path / "graph-e1-i0.ckpt"


def test_a_scalar_parameter_stays_a_scalar_in_checkpoints_and_safetensors(tmp_path, capsys):
    """Elementwise's ``biases`` has shape (): numpy.ascontiguousarray made it (1,), which no longer loaded."""
    path = checkpoint(tmp_path)
    assert load_checkpoint(path).parameters["b.biases"].shape == ()
    assert main(["export", str(path), "--format", "safetensors"]) == 0
    inputs = np.ones((2, 2, 3), dtype="float32")
    np.testing.assert_array_equal(sigma_core.load(path.with_suffix(".safetensors"), "numpy").predict(inputs),
                                  sigma_core.load(path, "numpy").predict(inputs))


def test_without_sigmann_onnx_onnx_export_is_one_line_pointing_to_the_plugins(tmp_path, capsys, monkeypatch):
    path = checkpoint(tmp_path)
    monkeypatch.setenv("SIGMA_PLUGINS", "sigmann-predict")  # the core and this plugin, no sigmann-onnx
    plugins.reset()
    try:
        capsys.readouterr()
        assert main(["export", str(path), "--format", "onnx"]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: sigma export: unknown format 'onnx' (installed: safetensors); {plugins.MORE}"]
    finally:
        monkeypatch.delenv("SIGMA_PLUGINS")
        plugins.reset()  # the next test sees every installed plugin again
    assert not path.with_suffix(".onnx").exists()

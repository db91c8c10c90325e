"""``sigma export --format onnx``: onnxruntime runs the exported graph and agrees with Network.predict."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime  # in the test extra, so CI installs it
import pytest

import sigma_core
from sigma_core import Preprocessing, SigmaError, components
from sigma_core.cli import main
from sigmann_predict.probabilities import class_probabilities
from sigmann_onnx import LAYERS as LAYER_TYPES
from sigmann_onnx.layers import activate


# Every layer kind that exports, each built-in activation, a flattened (2, 3) input and a branching graph.
LAYERS = """
[[network.layers]]
type = "input"
shape = [2, 3]
[[network.layers]]
type = "dense"
size = 6
activation = "relu"
[[network.layers]]
type = "dropout"
p = 0.5
[[network.layers]]
type = "dense"
name = "a"
size = 6
activation = "tanh"
[[network.layers]]
type = "elementwise"
name = "b"
activation = "sigmoid"
[[network.layers]]
type = "add"
name = "sum"
inputs = ["a", "b"]
[[network.layers]]
type = "concatenate"
inputs = ["sum", "a"]
[[network.layers]]
type = "dense"
size = 5
activation = "softplus"
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "output"
[[network.layers]]
type = "softmax_ce"
"""

RUN = """
name = "graph"
seed = 0
[handler]
name = "numpy"
dtype = "{dtype}"
[data]
extractor = "synthetic"
n = 64
shape = [2, 3]
classes = 3
[training]
batch_size = 16
epochs = 1
prefetch = 0
[checkpoint]
directory = "{directory}"
every_epochs = 1
"""


def checkpoint(tmp_path, layers=LAYERS, dtype="float32"):
    if dtype == "float64":  # onnxruntime has no float64 Softplus kernel (the graph itself is valid ONNX)
        layers = layers.replace('"softplus"', '"relu"')
    run = tmp_path / "run.toml"
    run.write_text(RUN.format(dtype=dtype, directory=tmp_path.as_posix()) + layers)
    assert main(["train", str(run), "--quiet"]) == 0
    return tmp_path / "graph-e1-i0.ckpt"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_onnxruntime_reproduces_predict(tmp_path, capsys, dtype):
    path = checkpoint(tmp_path, dtype=dtype)
    capsys.readouterr()
    assert main(["export", str(path), "--format", "onnx"]) == 0
    assert capsys.readouterr().out.strip() == str(path.with_suffix(".onnx"))
    session = onnxruntime.InferenceSession(str(path.with_suffix(".onnx")), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["inputs"]
    assert [o.name for o in session.get_outputs()] == ["predictions", "probabilities"]
    inputs = np.random.default_rng(1).standard_normal((7, 2, 3)).astype(dtype)
    predictions, probabilities = session.run(None, {"inputs": inputs})
    network = sigma_core.load(path, "numpy")
    expected = network.predict(inputs)
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(predictions, expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(probabilities, class_probabilities(network, expected), rtol=tolerance, atol=tolerance)
    assert predictions.dtype == np.dtype(dtype) and predictions.shape == (7, 3)


def test_a_regression_network_has_no_probabilities(tmp_path, capsys):
    layers = '[[network.layers]]\ntype = "input"\nshape = [2, 3]\n[[network.layers]]\ntype = "dense"\nsize = 3\n' \
             '[[network.layers]]\ntype = "squared_difference"\n'
    path = checkpoint(tmp_path, layers.replace("size = 3", "size = 1"))
    out = tmp_path / "model.onnx"
    assert main(["export", str(path), "--format", "onnx", "--out", str(out)]) == 0
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    inputs = np.ones((2, 6), dtype="float32").reshape(2, 2, 3)
    (predictions,) = session.run(None, {"inputs": inputs})
    np.testing.assert_allclose(predictions, sigma_core.load(path, "numpy").predict(inputs), rtol=1e-6)


def test_an_unsupported_layer_is_one_line_naming_it_and_the_layers_that_export(tmp_path, capsys):
    pytest.importorskip("sigmann_recurrent")
    pytest.importorskip("sigmann_maxout")
    layers = '[[network.layers]]\ntype = "input"\nshape = [2, 3]\n[[network.layers]]\ntype = "lstm"\nsize = 4\n' \
             '[[network.layers]]\ntype = "dense"\nsize = 3\n[[network.layers]]\ntype = "softmax_ce"\n'
    path = checkpoint(tmp_path, layers)
    capsys.readouterr()
    assert main(["export", str(path), "--format", "onnx"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    exporting = sorted(c.name.removeprefix("onnx/") for c in components("exporter") if c.name.startswith("onnx/"))
    assert {"add", "concatenate", "dense", "dropout", "elementwise", "input", "maxout", "output", "softmax_ce",
            "squared_difference"} <= set(exporting)  # the core's layers and sigmann-maxout's; other plugins add theirs
    assert err == f"error: layer '2-lstm' (LSTM) does not export to ONNX; these layers do: {', '.join(exporting)}"
    assert not path.with_suffix(".onnx").exists()


def test_a_plugin_activation_is_named_in_the_error():
    def swish(handler, x):  # a plugin's activation: a function, not one of the core's kernels
        return x * handler.sigmoid(x)

    with pytest.raises(SigmaError) as caught:
        activate(None, "08-dense", SimpleNamespace(activation=swish), "x")
    assert str(caught.value).startswith("layer '08-dense': activation 'swish' does not export to ONNX; "
                                        "these do: none, relu, sigmoid, tanh, softplus")  # then plugins' exporters


def test_a_plugin_activation_registered_as_a_lambda_is_named_as_registered(monkeypatch):
    swish = lambda handler, x: x * handler.sigmoid(x)  # noqa: E731 -- what a plugin may register
    registered = [SimpleNamespace(name="relu", load=lambda: None), SimpleNamespace(name="swish", load=lambda: swish)]
    monkeypatch.setattr("sigmann_onnx.layers.components", lambda kind: registered)
    with pytest.raises(SigmaError) as caught:
        activate(None, "08-dense", SimpleNamespace(activation=swish), "x")
    assert str(caught.value).startswith("layer '08-dense': activation 'swish' does not export to ONNX; ")


def test_without_the_onnx_package_the_error_says_what_to_install(tmp_path, capsys, monkeypatch):
    path = checkpoint(tmp_path)
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    capsys.readouterr()
    assert main(["export", str(path), "--format", "onnx"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] + "\n" == "error: exporting to ONNX needs the onnx package: pip install onnx\n"


def test_a_layer_plugin_joins_the_table_with_its_own_exporter(tmp_path, capsys):
    pytest.importorskip("sigmann_maxout")  # registers "onnx/maxout" (sigmann_maxout.export_maxout)
    layers = LAYERS.replace('type = "dense"\nsize = 5\nactivation = "softplus"', 'type = "maxout"\nsize = 5\npieces = 3')
    path = checkpoint(tmp_path, layers)
    capsys.readouterr()
    assert main(["export", str(path), "--format", "onnx"]) == 0
    session = onnxruntime.InferenceSession(str(path.with_suffix(".onnx")), providers=["CPUExecutionProvider"])
    inputs = np.random.default_rng(2).standard_normal((4, 2, 3)).astype("float32")
    predictions, _ = session.run(None, {"inputs": inputs})
    np.testing.assert_allclose(predictions, sigma_core.load(path, "numpy").predict(inputs), rtol=1e-5, atol=1e-5)


def test_the_format_and_every_core_layer_are_in_the_exporter_table():
    names = {c.name: c.distribution for c in components("exporter")}
    assert names["onnx"] == "sigmann-onnx"
    assert {f"onnx/{layer}" for layer in LAYER_TYPES} <= set(names)


def test_the_fitted_preprocessing_travels_in_the_metadata(tmp_path, capsys):
    """Issue 26: the graph starts after the run's preprocessing; its metadata ``preprocess`` holds the transforms
    with the statistics fitted in training, and raw inputs put through them reproduce ``predict`` on raw inputs."""
    run = RUN.format(dtype="float32", directory=tmp_path.as_posix()).replace(
        "classes = 3\n", "classes = 3\npreprocess = [{ normalise = { per_feature = true } }, { standardise = true }]\n")
    (tmp_path / "run.toml").write_text(run + LAYERS)
    assert main(["train", str(tmp_path / "run.toml"), "--quiet"]) == 0
    path = tmp_path / "graph-e1-i0.ckpt"
    assert main(["export", str(path), "--format", "onnx"]) == 0
    model = onnx.load(str(path.with_suffix(".onnx")))
    preprocess = json.loads({prop.key: prop.value for prop in model.metadata_props}["preprocess"])
    assert [list(table) for table in preprocess] == [["normalise"], ["standardise"]]
    assert preprocess == sigma_core.load(path, "numpy").preprocessing.fitted()
    raw = np.random.default_rng(3).normal(3, 2, (7, 2, 3))  # far from what the network trained on
    session = onnxruntime.InferenceSession(str(path.with_suffix(".onnx")), providers=["CPUExecutionProvider"])
    predictions, _ = session.run(None, {"inputs": Preprocessing(preprocess).inputs(raw).astype("float32")})
    expected = sigma_core.load(path, "numpy").predict(raw)
    np.testing.assert_allclose(predictions, expected, rtol=1e-5, atol=1e-5)
    network = sigma_core.load(path, "numpy")
    network.preprocessing = None  # raw inputs into the bare network: something else
    assert np.abs(network.predict(raw) - expected).max() > 1e-3

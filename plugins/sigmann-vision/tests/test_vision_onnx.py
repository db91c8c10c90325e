"""``sigma export --format onnx`` through the vision layers' exporters: onnxruntime runs the graph and agrees with
Network.predict, batch norm's running statistics included."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import Dense, Input, Network, NumpyHandler, SoftmaxCE
from sigmann_vision import AvgPool2D, BatchNorm, Conv2D, Flatten, GlobalAvgPool, LayerNorm, MaxPool2D, Permute, Reshape

onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime runs the exported graph")
export_onnx = pytest.importorskip("sigmann_onnx.export", reason="sigmann-onnx writes the graph").export_onnx


def test_every_vision_layer_exports_and_onnxruntime_agrees(tmp_path):
    dtype = "float32"  # onnxruntime's CPU provider has no float64 convolution
    trunk = (Input(64) + Reshape([8, 8, 1]) + Permute([2, 0, 1]) + Conv2D(4, 3, stride=[1, 2], padding="same", name="c1")
             + BatchNorm(activation="relu", name="bn") + MaxPool2D(3, stride=1, padding=1)
             + Conv2D(6, [2, 3], dilation=[2, 1], groups=2, padding=[1, 0, 0, 1], activation="tanh")
             + AvgPool2D(2, padding=1) + LayerNorm())
    branches = [GlobalAvgPool(), Flatten()]
    for branch in branches:
        network = Network(trunk + branch + BatchNorm(name="bn_flat") + Dense(3) + SoftmaxCE(), name="vision")
        handler = NumpyHandler(dtype, seed=0)
        network.initialise(handler)
        rng = numpy.random.default_rng(0)
        for key, array in network.state.items():  # running statistics away from their starting 0 and 1
            handler.fill(array, handler.asarray(rng.uniform(0.5, 1.5, array.shape) if key.endswith("var")
                                                else rng.standard_normal(array.shape)))
        path = export_onnx(network, tmp_path / "vision.onnx")
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        inputs = rng.standard_normal((5, 64)).astype(dtype)
        predictions, probabilities = session.run(["predictions", "probabilities"], {"inputs": inputs})
        expected = network.predict(inputs)
        # Every value is a few sums of at most 64 float32 terms deep, each rounded independently in either program.
        eps = float(numpy.finfo(dtype).eps) * 64
        numpy.testing.assert_allclose(predictions, expected, rtol=eps, atol=eps)
        numpy.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=eps * 10)

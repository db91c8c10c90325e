"""The vision layers in ONNX (opset 17), registered as ``"onnx/<layer type>"`` exporters for sigmann-onnx.

Each is called as ``export(graph, name, layer, inputs)`` (see
``sigmann_onnx.export.Graph``) and returns the value its layer outputs. The
layers' parameters and state (batch norm's running statistics) are already in
the graph as ``"<layer>.<name>"``; weights are (O, C/groups, KH, KW), ONNX's
own layout, and padding is (top, bottom, left, right), ONNX's pads are
(top, left, bottom, right). Only sigma export imports this module, with
sigmann-onnx installed.
"""

from __future__ import annotations

from sigmann_onnx.layers import activate


def _pads(padding):
    top, bottom, left, right = padding
    return [top, left, bottom, right]


def conv2d(graph, name, layer, inputs):
    arrays = [inputs[0], f"{name}.weights"] + ([f"{name}.biases"] if "biases" in layer.parameter_shapes else [])
    y = graph.op("Conv", arrays, f"{name}/conv", kernel_shape=list(layer.kernel), strides=list(layer.stride),
                 pads=_pads(layer.padding), dilations=list(layer.dilation), group=layer.groups)
    return activate(graph, name, layer, y)


def max_pool2d(graph, name, layer, inputs):
    return graph.op("MaxPool", inputs, f"{name}/pool", kernel_shape=list(layer.kernel), strides=list(layer.stride),
                    pads=_pads(layer.padding))


def avg_pool2d(graph, name, layer, inputs):
    """Padding counts as zeros, as the layer computes it."""
    return graph.op("AveragePool", inputs, f"{name}/pool", kernel_shape=list(layer.kernel),
                    strides=list(layer.stride), pads=_pads(layer.padding), count_include_pad=1)


def global_avg_pool(graph, name, layer, inputs):
    pooled = graph.op("GlobalAveragePool", inputs, f"{name}/pool")
    return graph.op("Flatten", [pooled], f"{name}/flat", axis=1)


def batch_norm(graph, name, layer, inputs):
    """Inference: normalised with the running statistics."""
    y = graph.op("BatchNormalization", [inputs[0], *(f"{name}.{key}" for key in
                                                     ("gamma", "beta", "running_mean", "running_var"))],
                 f"{name}/bn", epsilon=layer.eps)
    return activate(graph, name, layer, y)


def layer_norm(graph, name, layer, inputs):
    return graph.op("LayerNormalization", [inputs[0], f"{name}.gamma", f"{name}.beta"], f"{name}/ln", axis=1,
                    epsilon=layer.eps)


def reshape(graph, name, layer, inputs):
    return graph.op("Reshape", [inputs[0], graph.constant(f"{name}/shape", [-1, *layer.output_shape])], f"{name}/reshape")


def flatten(graph, name, layer, inputs):
    return graph.op("Flatten", inputs, f"{name}/flat", axis=1)


def permute(graph, name, layer, inputs):
    return graph.op("Transpose", inputs, f"{name}/transpose", perm=[0, *(a + 1 for a in layer.axes)])

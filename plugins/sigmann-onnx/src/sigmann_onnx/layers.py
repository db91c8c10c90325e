"""The ONNX parts of the core's layers, registered as ``"onnx/<layer type>"`` exporters.

Each is called as ``export(graph, name, layer, inputs)`` with the
:class:`~sigmann_onnx.export.Graph` being written, the layer's name and object,
and the graph values of its inputs, and returns the value the layer outputs
(``None`` for a cost layer, which has none at inference).
"""

from __future__ import annotations

from sigma_core import SigmaError, components

#: The core's activations by kernel name, and the ONNX operator of each (None: the identity).
ACTIVATIONS = {"none": None, "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softplus": "Softplus"}
#: A plugin activation's exporter is registered as this prefix and the activation's name (``onnx-activation/gelu``)
#: and called as ``export(graph, layer name, x)``, returning the activated value.
ACTIVATION_PREFIX = "onnx-activation/"


def activate(graph, name: str, layer, x: str) -> str:
    """``layer.activation`` applied to ``x``: one of :data:`ACTIVATIONS`, a plugin activation's registered
    exporter, else a one-line error naming it and those that export."""
    kind = getattr(layer.activation, "kernel_name", None)
    if kind in ACTIVATIONS:
        return graph.op(ACTIVATIONS[kind], [x], f"{name}/{kind}") if ACTIVATIONS[kind] else x
    exporters = {c.name.removeprefix(ACTIVATION_PREFIX): c for c in components("exporter")
                 if c.name.startswith(ACTIVATION_PREFIX)}
    registered = next((c.name for c in components("activation") if c.load() is layer.activation), None)
    if registered not in exporters:
        activation = registered or getattr(layer.activation, "__name__", layer.activation)
        raise SigmaError(f"layer {name!r}: activation {activation!r} does not export to ONNX; "
                         f"these do: {', '.join([*ACTIVATIONS, *sorted(exporters)])}")
    return exporters[registered].load()(graph, name, x)


def input_(graph, name, layer, inputs):
    return graph.input(layer.external, layer.output_shape)


def passthrough(graph, name, layer, inputs):
    """Dropout (off at inference) and output layers: their input, unchanged."""
    return inputs[0]


def dense(graph, name, layer, inputs):
    flat = len(layer.input_shape) != 1 and not layer.keep_time  # over time steps: MatMul takes (batch, T, features)
    x = graph.op("Flatten", inputs, f"{name}/flat", axis=1) if flat else inputs[0]
    y = graph.op("MatMul", [x, f"{name}.weights"], f"{name}/matmul")
    y = graph.op("Add", [y, f"{name}.biases"], f"{name}/add") if "biases" in layer.parameter_shapes else y
    return activate(graph, name, layer, y)


def elementwise(graph, name, layer, inputs):
    y = graph.op("Mul", [inputs[0], f"{name}.weights"], f"{name}/mul")
    return activate(graph, name, layer, graph.op("Add", [y, f"{name}.biases"], f"{name}/add"))


def concatenate(graph, name, layer, inputs):
    return graph.op("Concat", inputs, f"{name}/concat", axis=-1)


def add(graph, name, layer, inputs):
    return graph.op("Sum", inputs, f"{name}/sum")


def softmax_ce(graph, name, layer, inputs):
    """No output at inference; the graph gains ``probabilities``, the softmax of the predictions (its input)."""
    graph.output(graph.op("Softmax", inputs, "probabilities", axis=-1), layer.input_shapes[0])


def cost(graph, name, layer, inputs):
    """A cost layer without an inference output of its own."""

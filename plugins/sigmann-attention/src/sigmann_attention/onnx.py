"""The transformer's layers and GELU in ONNX (opset 17), registered for sigmann-onnx's exporter table.

The layers are ``"onnx/<layer type>"`` exporters, called as ``export(graph, name, layer, inputs)`` (see
``sigmann_onnx.export.Graph``); the activations are ``"onnx-activation/<name>"`` exporters, called as
``export(graph, name, x)``. Parameters are already in the graph as ``"<layer>.<name>"``. Token ids arrive as the
graph's float input, as ``Network.predict`` takes them, and are cast to int64 for ``Gather``. Opset 17 has no
``Gelu`` operator (it came in 20), so GELU is written out of ``Erf`` or ``Tanh``. Only sigma export imports this
module, with sigmann-onnx installed.
"""

from __future__ import annotations

import math

import numpy

FLOAT, INT64, BOOL, DOUBLE = 1, 7, 9, 11  # onnx.TensorProto's element types, without importing onnx here


def embedding(graph, name, layer, inputs):
    ids = graph.op("Cast", inputs, f"{name}/ids", to=INT64)
    return graph.op("Gather", [f"{name}.weights", ids], f"{name}/gather", axis=0)


def positional(graph, name, layer, inputs):
    """The table's first T rows (T is fixed by the network's input shape) added to every sequence."""
    steps = layer.input_shape[0]
    rows = graph.op("Slice", [f"{name}.weights", graph.constant(f"{name}/start", [0]),
                              graph.constant(f"{name}/end", [steps]), graph.constant(f"{name}/axis", [0])],
                    f"{name}/rows")
    return graph.op("Add", [inputs[0], rows], f"{name}/add")


def token_norm(graph, name, layer, inputs):
    return graph.op("LayerNormalization", [inputs[0], f"{name}.gamma", f"{name}.beta"], f"{name}/ln", axis=-1,
                    epsilon=layer.eps)


def tied_logits(graph, name, layer, inputs):
    """x·Wᵀ with W the embedding's table, in the graph once under its owner's id."""
    table = graph.op("Transpose", [layer.shared_parameters["weights"]], f"{name}/table_t", perm=[1, 0])
    return graph.op("MatMul", [inputs[0], table], f"{name}/matmul")


def attention(graph, name, layer, inputs):
    """As the ``attention`` op computes it at inference: hidden scores get the dtype's lowest value rather than
    −inf (a softmax over a row of −inf is NaN in ONNX), and a query whose every key is hidden outputs zeros."""
    steps, width = layer.input_shape
    heads = layer.heads
    depth = width // heads
    qkv = graph.op("Add", [graph.op("MatMul", [inputs[0], f"{name}.qkv_weights"], f"{name}/qkv_matmul"),
                           f"{name}.qkv_biases"], f"{name}/qkv")
    split = graph.op("Reshape", [qkv, graph.constant(f"{name}/split_shape", [0, steps, 3, heads, depth])],
                     f"{name}/split")
    by_head = graph.op("Transpose", [split], f"{name}/by_head", perm=[2, 0, 3, 1, 4])  # (3, batch, heads, T, d)
    q, k, v = (graph.op("Gather", [by_head, graph.constant(f"{name}/{part}_index", part_index)], f"{name}/{part}",
                        axis=0) for part_index, part in enumerate("qkv"))
    scores = graph.op("MatMul", [q, graph.op("Transpose", [k], f"{name}/k_t", perm=[0, 1, 3, 2])],
                      f"{name}/scores_raw")
    scores = graph.op("Mul", [scores, graph.constant(f"{name}/scale", 1.0 / math.sqrt(depth))], f"{name}/scores")
    hidden, visible_rows = _hidden(graph, name, layer, inputs, steps)
    if hidden is not None:
        lowest = graph.constant(f"{name}/lowest", numpy.finfo(graph.dtype).min)
        scores = graph.op("Where", [hidden, lowest, scores], f"{name}/scores_hidden")
    weights = graph.op("Softmax", [scores], f"{name}/weights", axis=-1)
    if visible_rows is not None:
        weights = graph.op("Mul", [weights, visible_rows], f"{name}/weights_visible")
    mixed = graph.op("Transpose", [graph.op("MatMul", [weights, v], f"{name}/mixed_by_head")], f"{name}/mixed_t",
                     perm=[0, 2, 1, 3])
    mixed = graph.op("Reshape", [mixed, graph.constant(f"{name}/merge_shape", [0, steps, width])], f"{name}/mixed")
    out = graph.op("MatMul", [mixed, f"{name}.out_weights"], f"{name}/out_matmul")
    return graph.op("Add", [out, f"{name}.out_biases"], f"{name}/out")


def _hidden(graph, name, layer, inputs, steps):
    """The hidden scores as a boolean (T, T) or (batch, 1, T, T) value, and with a padding mask the (batch, 1, T, 1)
    0/1 factor that zeroes queries with no visible key; None for what does not apply."""
    hidden = graph.constant(f"{name}/causal", numpy.triu(numpy.ones((steps, steps), bool), 1)) if layer.causal else None
    if len(inputs) == 1:
        return (None if hidden is None else graph.op("Cast", [hidden], f"{name}/causal_bool", to=BOOL)), None
    padding = graph.op("Equal", [inputs[1], graph.constant(f"{name}/zero", 0.0)], f"{name}/padding")
    padding = graph.op("Unsqueeze", [padding, graph.constant(f"{name}/mask_axes", [1, 2])], f"{name}/padding_keys")
    if hidden is not None:
        padding = graph.op("Or", [graph.op("Cast", [hidden], f"{name}/causal_bool", to=BOOL), padding],
                           f"{name}/hidden")
    visible = graph.op("Cast", [graph.op("Not", [padding], f"{name}/visible")], f"{name}/visible_number",
                       to=graph.element_type)
    rows = graph.op("ReduceMax", [visible], f"{name}/visible_rows", axes=[-1], keepdims=1)
    return padding, rows


def gelu(graph, name, x):
    """x·Φ(x) = 0.5·x·(1 + erf(x/√2)). onnxruntime's CPU ``Erf`` takes float32 only, so a float64 graph takes
    erf in float32 (relative error ~1e-7, the rest in float64)."""
    scaled = graph.op("Mul", [x, graph.constant(f"{name}/rsqrt2", 1 / math.sqrt(2))], f"{name}/gelu_scaled")
    if graph.dtype == numpy.float32:
        return _half_x_times_one_plus(graph, name, x, graph.op("Erf", [scaled], f"{name}/gelu_erf"))
    narrow = graph.op("Cast", [scaled], f"{name}/gelu_scaled32", to=FLOAT)
    erf = graph.op("Cast", [graph.op("Erf", [narrow], f"{name}/gelu_erf32")], f"{name}/gelu_erf", to=DOUBLE)
    return _half_x_times_one_plus(graph, name, x, erf)


def gelu_tanh(graph, name, x):
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    cube = graph.op("Mul", [graph.op("Mul", [x, x], f"{name}/gelu_square"), x], f"{name}/gelu_cube")
    inner = graph.op("Add", [x, graph.op("Mul", [cube, graph.constant(f"{name}/gelu_c", 0.044715)],
                                         f"{name}/gelu_cubic")], f"{name}/gelu_inner")
    scaled = graph.op("Mul", [inner, graph.constant(f"{name}/gelu_k", math.sqrt(2 / math.pi))], f"{name}/gelu_arg")
    return _half_x_times_one_plus(graph, name, x, graph.op("Tanh", [scaled], f"{name}/gelu_tanh"))


def _half_x_times_one_plus(graph, name, x, t):
    one_plus = graph.op("Add", [t, graph.constant(f"{name}/gelu_one", 1.0)], f"{name}/gelu_one_plus")
    half_x = graph.op("Mul", [x, graph.constant(f"{name}/gelu_half", 0.5)], f"{name}/gelu_half_x")
    return graph.op("Mul", [half_x, one_plus], f"{name}/gelu")

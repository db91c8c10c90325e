"""Using a trained network: load one from a checkpoint or an exported file, predict, export.

A checkpoint holds the run config, so the architecture is rebuilt from its
``network.layers``; an exported ``.safetensors`` file carries the same layer
list as JSON metadata beside the weights, so it needs no run file either.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy

from .errors import SigmaError


def load(path, handler=None, *, dtype: str | None = None):
    """The network saved in ``path`` (a ``.ckpt`` checkpoint or a ``.safetensors`` export), ready to
    :meth:`~sigma_core.network.Network.predict` on ``handler`` (an object, a name, or None: ``SIGMA_HANDLER``
    or the fastest available) in ``dtype`` (default: the one it was saved in)."""
    from . import backend
    from .architecture import from_layer_list
    from .network import Network

    path = Path(path)
    if path.suffix == ".safetensors":
        name, layers, saved_dtype, parameters, _ = _read_safetensors(path)
    else:
        from .checkpoint import load_checkpoint
        checkpoint = load_checkpoint(path)
        if checkpoint.config is None:
            raise SigmaError(f"checkpoint {path}: saved from code without a run config, so it holds no architecture; "
                             "build the Network in code and call network.load_state_dict(checkpoint.parameters)")
        name, layers = checkpoint.config["name"], checkpoint.config["network"]["layers"]
        saved_dtype, parameters = checkpoint.metadata["handler"]["dtype"], checkpoint.parameters
    if handler is None or isinstance(handler, str):
        handler_name, source = backend.resolve_handler_name(cli=handler)
        handler = backend.create_handler(handler_name, dtype=dtype or saved_dtype, seed=0, source=source)
    network = Network(from_layer_list(layers), name=name)
    network.initialise(handler)
    try:
        network.load_state_dict(parameters)
    except SigmaError as error:
        raise SigmaError(f"{path}: the parameters do not fit its architecture ({error})") from None
    return network


def class_probabilities(network, predictions: numpy.ndarray) -> numpy.ndarray:
    """Per-class probabilities: the softmax of a softmax cross-entropy network's logits; other outputs as they are."""
    if not any(type(layer).__name__ == "SoftmaxCrossEntropy" for layer in network.layers.values()):
        return predictions
    shifted = numpy.exp(predictions - predictions.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def export_safetensors(checkpoint, path) -> Path:
    """Write a loaded checkpoint's parameters to ``path``, with its name, dtype and layer list as metadata."""
    try:
        from safetensors.numpy import save_file
    except ImportError:
        raise SigmaError("exporting to safetensors needs the safetensors package: pip install 'sigmann[export]'") from None
    if checkpoint.config is None:
        raise SigmaError(f"checkpoint {checkpoint.path}: saved from code without a run config, so it holds no architecture")
    metadata = {"format": "sigma-network", "name": checkpoint.config["name"], "dtype": checkpoint.metadata["handler"]["dtype"],
                "layers": json.dumps(checkpoint.config["network"]["layers"]), "preprocess": json.dumps(_preprocess(checkpoint))}
    save_file({pid: numpy.asarray(a, order="C") for pid, a in checkpoint.parameters.items()}, str(path), metadata)
    return Path(path)


def saved_preprocess(path) -> list:
    """The run's ``data.preprocess`` steps, saved in a checkpoint or an export, for raw inputs such as images."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return _read_safetensors(path)[4]
    from .checkpoint import load_checkpoint
    return _preprocess(load_checkpoint(path))


def _preprocess(checkpoint) -> list:
    return (checkpoint.config or {}).get("data", {}).get("preprocess", [])


def _read_safetensors(path: Path):
    try:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file, safe_open
    except ImportError:
        raise SigmaError(f"{path}: reading safetensors needs the safetensors package: pip install 'sigmann[export]'") from None
    try:
        with safe_open(str(path), framework="numpy") as stream:
            metadata = stream.metadata() or {}
        if metadata.get("format") != "sigma-network":
            raise SigmaError(f"{path}: not a network exported by `sigma export` (no sigma-network metadata)")
        return (metadata["name"], json.loads(metadata["layers"]), metadata["dtype"], load_file(str(path)),
                json.loads(metadata.get("preprocess", "[]")))
    except (OSError, SafetensorError, KeyError, ValueError) as error:
        raise SigmaError(f"{path}: cannot read it as a safetensors export ({error})") from None


ONNX_LAYERS = "input, output, dense and elementwise (activation none, relu, sigmoid, tanh or softplus), dropout, " \
              "concatenate, add, softmax_ce, squared_difference"
_ONNX_ACTIVATIONS = {"none": None, "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softplus": "Softplus"}


def export_onnx(source, path) -> Path:
    """Write the inference graph of ``source`` (a network, or what :func:`load` reads) to ``path`` as ONNX:
    input ``inputs`` (batch first), output ``predictions`` (what :meth:`~sigma_core.network.Network.predict`
    returns) and, for a softmax cross-entropy network, ``probabilities``. Only :data:`ONNX_LAYERS` map to ONNX."""
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        raise SigmaError("exporting to ONNX needs the onnx package: pip install 'sigmann[onnx]'") from None
    from .layers import cost, dense, dropout, io, merge

    network = load(source, "numpy") if isinstance(source, (str, Path)) else source
    dtype = numpy.dtype(network.handler.dtype)
    element = helper.np_dtype_to_tensor_dtype(dtype)
    nodes, weights, graph_inputs, values = [], [], [], {}

    def op(kind, inputs, output, **attributes):
        nodes.append(helper.make_node(kind, inputs, [output], **attributes))
        return output

    def activate(name, layer, x):
        kind = getattr(layer.activation, "kernel_name", None)
        if kind not in _ONNX_ACTIVATIONS:
            activation = getattr(layer.activation, "__name__", layer.activation)
            raise SigmaError(f"layer {name!r}: activation {activation!r} does not export to ONNX; "
                             f"these do: {', '.join(_ONNX_ACTIVATIONS)}")
        return op(_ONNX_ACTIVATIONS[kind], [x], f"{name}/{kind}") if _ONNX_ACTIVATIONS[kind] else x

    for name, layer, sources, params in network._plan():
        xs = [values[source] for source in sources]
        for param, array in params.items():
            weights.append(numpy_helper.from_array(array.to_numpy().astype(dtype), f"{name}.{param}"))
        kind = type(layer)
        if kind is io.Input:
            graph_inputs.append(helper.make_tensor_value_info(layer.alias, element, ["batch", *layer.output_shape]))
            values[name] = layer.alias
        elif kind is dense.Dense and not layer.keep_time:
            x = op("Flatten", xs, f"{name}/flat", axis=1) if len(layer.input_shape) != 1 else xs[0]
            y = op("MatMul", [x, f"{name}.weights"], f"{name}/matmul")
            y = op("Add", [y, f"{name}.biases"], f"{name}/add") if "biases" in params else y
            values[name] = activate(name, layer, y)
        elif kind is dense.Elementwise:
            y = op("Add", [op("Mul", [xs[0], f"{name}.weights"], f"{name}/mul"), f"{name}.biases"], f"{name}/add")
            values[name] = activate(name, layer, y)
        elif kind in (dropout.Dropout, io.Output):
            values[name] = xs[0]
        elif kind is merge.Concatenate:
            values[name] = op("Concat", xs, f"{name}/concat", axis=-1)
        elif kind is merge.Add:
            values[name] = op("Sum", xs, f"{name}/sum")
        elif kind not in (cost.SoftmaxCrossEntropy, cost.SquaredDifference):
            raise SigmaError(f"layer {name!r} ({kind.__name__}) does not export to ONNX; these layers do: {ONNX_LAYERS}")
    last = next(name for name in reversed(network.layers) if not network.layers[name].is_cost)
    outputs = [op("Identity", [values[last]], "predictions")]
    if any(type(layer) is cost.SoftmaxCrossEntropy for layer in network.layers.values()):
        outputs.append(op("Softmax", ["predictions"], "probabilities", axis=-1))
    shape = ["batch", *network.layers[last].output_shape]
    graph = helper.make_graph(nodes, network.name, graph_inputs,
                              [helper.make_tensor_value_info(out, element, shape) for out in outputs], weights)
    model = helper.make_model(graph, producer_name="sigma", opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)

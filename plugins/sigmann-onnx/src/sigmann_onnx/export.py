"""A network's inference graph as an ONNX model, written layer by layer from the exporter table.

The graph has input ``inputs`` (batch first), output ``predictions`` (what
``Network.predict`` returns) and, for a softmax cross-entropy network,
``probabilities``. The graph starts after the run's ``preprocess`` transforms:
the model's metadata ``preprocess`` holds them, statistics fitted in training,
as JSON (``sigma_core.Preprocessing(json.loads(...)).inputs(raw)`` applies
them). Each layer's part comes from the exporter registered as
``"onnx/<layer type>"`` (:mod:`sigmann_onnx.layers` for the core's layers, a
layer plugin's own for its layers); a layer without one is an error that lists
the layers that export.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy

from sigma_core import SigmaError, atomic_write, components, load

OPSET = 17
PREFIX = "onnx/"


class Graph:
    """The ONNX graph being written, handed to every layer's exporter.

    A layer's parameters and state arrays are already in the graph as ``"<layer name>.<param>"``
    (``"2-dense.weights"``, ``"bn.running_mean"``), in the network's dtype. An exporter adds nodes with
    :meth:`op`, graph inputs with :meth:`input`, extra graph outputs with
    :meth:`output` and constants with :meth:`constant`, and returns the name of
    the value its layer outputs.
    """

    def __init__(self, dtype: numpy.dtype):
        from onnx import helper, numpy_helper

        self._helper, self._numpy_helper = helper, numpy_helper
        self.dtype, self.element_type = dtype, helper.np_dtype_to_tensor_dtype(dtype)
        self.nodes, self.inputs, self.outputs = [], [], []

    def op(self, kind: str, inputs: list[str], output: str, **attributes) -> str:
        """Add the ONNX operator ``kind`` (``"MatMul"``) from ``inputs`` to ``output``; return ``output``."""
        self.nodes.append(self._helper.make_node(kind, inputs, [output], **attributes))
        return output

    def constant(self, name: str, values) -> str:
        """Add a constant ``name`` holding ``values`` (int64 if they are integers, else the network's dtype), such as
        the target shape of a ``Reshape``; return ``name``."""
        array = numpy.asarray(values)
        array = array.astype(numpy.int64 if array.dtype.kind in "iub" else self.dtype)
        return self.op("Constant", [], name, value=self._numpy_helper.from_array(array, name))

    def input(self, name: str, shape) -> str:
        """Add a graph input ``name`` of a batch of records of ``shape``; return ``name``."""
        self.inputs.append(self._helper.make_tensor_value_info(name, self.element_type, ["batch", *shape]))
        return name

    def output(self, name: str, shape) -> None:
        """Make the value ``name`` (a batch of records of ``shape``) an output of the graph, after ``predictions``."""
        self.outputs.append(self._helper.make_tensor_value_info(name, self.element_type, ["batch", *shape]))


def _layer_types(network) -> dict[str, str]:
    """Each layer's registered type, by layer name (a run file may have named it by an alias: ``fc``)."""
    canonical = {key: c.name for c in components("layer") for key in (c.name, *c.aliases)}
    names = network.architecture.resolved_names()
    return {names[id(construct)]: canonical.get(construct.layer_type, construct.layer_type)
            for construct in network.architecture.ordered()}


def _sources(network) -> dict[str, list[str]]:
    """The names of the layers feeding each layer."""
    names = network.architecture.resolved_names()
    return {names[id(c)]: [names[id(source)] for source in c.inputs] for c in network.architecture.ordered()}


def export_onnx(source, path) -> Path:
    """Write the inference graph of ``source`` (a network, or a checkpoint or export :func:`sigma_core.load`
    reads) to ``path`` as ONNX (see the module docstring)."""
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        raise SigmaError("exporting to ONNX needs the onnx package: pip install onnx") from None
    network = load(source, "numpy") if isinstance(source, (str, Path)) else source
    exporters = {c.name.removeprefix(PREFIX): c for c in components("exporter") if c.name.startswith(PREFIX)}
    dtype = numpy.dtype(network.handler.dtype)
    graph = Graph(dtype)
    weights = [numpy_helper.from_array(array.to_numpy().astype(dtype), parameter)  # parameters and layer state
               for parameter, array in (*network.parameters.items(), *network.state.items())]
    values, types, sources = {}, _layer_types(network), _sources(network)
    for name, layer in network.layers.items():
        if types[name] not in exporters:
            raise SigmaError(f"layer {name!r} ({type(layer).__name__}) does not export to ONNX; these layers do: "
                             f"{', '.join(sorted(exporters))}")
        values[name] = exporters[types[name]].load()(graph, name, layer, [values[s] for s in sources[name]])
    last = next(name for name in reversed(network.layers) if not network.layers[name].is_cost)
    shape = network.layers[last].output_shape
    outputs = [helper.make_tensor_value_info(graph.op("Identity", [values[last]], "predictions"), graph.element_type,
                                             ["batch", *shape]), *graph.outputs]
    model = helper.make_model(helper.make_graph(graph.nodes, network.name, graph.inputs, outputs, weights),
                              producer_name="sigma", opset_imports=[helper.make_opsetid("", OPSET)])
    if network.preprocessing is not None:
        helper.set_model_props(model, {"preprocess": json.dumps(network.preprocessing.fitted())})
    onnx.checker.check_model(model)
    with atomic_write(path) as stream:  # whole or not at all; an unwritable path is one line naming it
        onnx.save(model, stream)
    return Path(path)

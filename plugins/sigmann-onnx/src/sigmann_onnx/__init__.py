"""ONNX export for Sigma (``sigma export --format onnx``), registered without importing onnx.

The format's exporter (:mod:`sigmann_onnx.export`) writes a network layer by
layer, taking each layer's part from the exporter table under
``"onnx/<layer type>"``: the core's layers are registered here
(:mod:`sigmann_onnx.layers`), and a layer plugin joins the format by
registering its own, as ``sigmann-maxout`` could::

    @hookimpl
    def register_exporters(register):
        register("onnx/maxout", "sigmann_maxout.onnx:export_maxout")

An exporter is called as ``export(graph, name, layer, inputs)`` and returns the
graph value its layer outputs (see :class:`sigmann_onnx.export.Graph`).
"""

from sigma_core import hookimpl

#: The core's layers, by registered type, and the exporter of each in sigmann_onnx.layers.
LAYERS = {"input": "input_", "output": "passthrough", "dropout": "passthrough", "dense": "dense",
          "elementwise": "elementwise", "concatenate": "concatenate", "add": "add", "softmax_ce": "softmax_ce",
          "squared_difference": "cost"}


@hookimpl
def register_exporters(register):
    register("onnx", "sigmann_onnx.export:export_onnx",
             description="the inference graph as ONNX (opset 17): input 'inputs', outputs 'predictions' [, 'probabilities']")
    for layer, exporter in LAYERS.items():
        register(f"onnx/{layer}", f"sigmann_onnx.layers:{exporter}", description=f"a {layer} layer in ONNX")

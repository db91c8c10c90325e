"""Network: an architecture instantiated on a handler, with its parameters.

Parameters have ids ``"<layer>.<param>"`` (as run values
``network.layers.<layer>.<param>``), which optimiser filters and initialiser
bindings match with glob patterns. A layer's state (``Layer.state_shapes``:
batch norm's running statistics) has ids of the same form, in :attr:`Network.state`:
saved and restored with the parameters (:meth:`Network.state_dict`), never trained.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy

from . import memory, plugins
from .architecture import Architecture, Construct
from .errors import ArchitectureError, SigmaError
from .layers.base import ForwardContext, with_current_ids


@dataclass
class ForwardResult:
    """One forward pass: external outputs, the total cost and each cost layer's part."""

    outputs: dict = field(default_factory=dict)
    cost: object = None  # Number, or None when no cost layer ran
    partial_costs: dict = field(default_factory=dict)


class LayerParameters(dict):
    """A layer's parameters by name, as its ``forward`` gets them: one that its ``parameter_shapes`` does not
    declare was never made, and asking for it is an error naming the parameter and the layer, not a KeyError."""

    def __init__(self, layer, parameters: dict):
        super().__init__(parameters)
        self.layer = layer

    def __missing__(self, param):
        layer = self.layer
        raise ArchitectureError(f"layer {layer.name!r} ({type(layer).__name__}): forward uses parameter {param!r}, "
                                f"which its parameter_shapes does not declare (declared: {', '.join(self) or 'none'})")


def check_output_shape(layer, out) -> None:
    """Refuse a layer whose forward returned records of another shape than the ``output_shape`` it declared (which
    the layers after it were built from): checked once per layer, at its first forward."""
    shape = getattr(out, "shape", None)
    if shape is not None and tuple(shape[1:]) != tuple(layer.output_shape):
        raise ArchitectureError(f"layer {layer.name!r} ({type(layer).__name__}) declares output_shape "
                                f"{tuple(layer.output_shape)} but its forward returned records of shape "
                                f"{tuple(shape[1:])} (batch {tuple(shape)})")


class Network:
    """A graph of layers with parameters on one handler."""

    def __init__(self, architecture, name: str = "network"):
        if isinstance(architecture, Construct):
            architecture = Architecture([architecture])
        self.architecture = architecture
        self.name = name
        self.handler = None
        self.layers: dict = {}  # name -> Layer, in execution order
        self.parameters: dict = {}  # "<layer>.<param>" -> NDArray
        self.state: dict = {}  # "<layer>.<state>" -> NDArray: what layers keep between steps, not trained
        self._sources: dict = {}  # layer name -> names of the layers feeding it
        self._plan_cache = None
        #: Bumped whenever the network changes other than by training: its parameters made anew
        #: (:meth:`initialise`) or an attribute of one of its layers set (:meth:`Layer.__setattr__
        #: <sigma_core.layers.base.Layer.__setattr__>`). Whatever holds on to its parameters' buffers or to
        #: what its layers did (a compiled training step) compares it instead of the layers themselves.
        self.version = 0
        #: The fitted ``preprocess`` transforms of the run that trained it (a :class:`~sigma_core.data.Preprocessing`,
        #: set by ``build_run`` and :func:`~sigma_core.inference.load`), which :meth:`predict` applies to raw
        #: inputs first; None: inputs go in as they are.
        self.preprocessing = None
        architecture.validate_types()  # then every layer is built: shape inference only, no arrays yet
        names = architecture.resolved_names()
        for construct in architecture.ordered():
            name = names[id(construct)]
            sources = [names[id(s)] for s in construct.inputs]
            input_shapes = [self.layers[s].output_shape for s in sources]
            spec = {"type": construct.layer_type, **construct.params}
            self.layers[name] = layer = plugins.build("layer", spec, name, input_shapes, where=construct.where or name)
            layer._network = self  # so that an edit of the layer changes self.version
            self._sources[name] = sources
        #: Layers whose first forward's output has yet to be checked against their declared ``output_shape``.
        self._unchecked = {name for name, layer in self.layers.items() if not layer.is_cost}
        if not any(getattr(layer, "external", None) is not None and not layer.input_shapes
                   for layer in self.layers.values()):
            raise ArchitectureError("the network has no input layer")

    def check_memory(self, dtype, copies: int = 1) -> None:
        """Refuse parameters (times ``copies``: gradients, optimiser memory) that would not fit in the
        memory available, before allocating, naming the layer where they stop fitting."""
        itemsize, total = numpy.dtype(dtype).itemsize * copies, 0
        extra = " with their gradients and optimiser memory" if copies > 1 else ""
        for name, layer in self.layers.items():
            total += sum(math.prod(shape) for shape in layer.parameter_shapes.values()) * itemsize
            memory.require(total, f"layer {name!r}: the {dtype} parameters up to this layer{extra}", ArchitectureError)

    def initialise(self, handler, initialisers: dict | None = None) -> dict:
        """Create every parameter on ``handler`` and initialise it: ``initialisers`` (glob on parameter ids ->
        initialiser) win over each layer's defaults. Returns which pattern set which id."""
        from .initialisers import apply_initialisers

        self.check_memory(handler.dtype)
        self.handler = handler
        self.parameters, self.state, defaults = {}, {}, {}
        self.version += 1
        for name, layer in self.layers.items():
            for param, shape in layer.parameter_shapes.items():
                self.parameters[f"{name}.{param}"] = handler.zeros(shape)
            initial = layer.initial_state()
            for key, shape in layer.state_shapes.items():
                self.state[f"{name}.{key}"] = handler.full(shape, initial.get(key, 0.0))
            defaults.update((f"{name}.{param}", initialiser)
                            for param, initialiser in layer.default_initialisers().items()
                            if param in layer.parameter_shapes)
        applied = apply_initialisers(handler, self.parameters, defaults)
        if initialisers:
            applied.update(apply_initialisers(handler, self.parameters, initialisers))
        return applied

    def _require_handler(self):
        if self.handler is None:
            raise SigmaError(f"network {self.name!r} is not initialised; call network.initialise(handler)")
        return self.handler

    def forward(self, externals: dict, training: bool = False) -> ForwardResult:
        """Run every layer in order. Cost layers run when their targets are given."""
        handler = self._require_handler()
        context = ForwardContext(training=training, externals=externals)
        values, result, total = {}, ForwardResult(), None
        for name, layer, sources, params in self._plan():
            inputs = [values[s] for s in sources]
            if layer.is_cost:
                if layer.targets_external not in externals:
                    continue
                cost = layer.forward(handler, inputs, params, context)
                result.partial_costs[name] = cost
                weighted = cost if layer.importance == 1.0 else cost * layer.importance
                total = weighted if total is None else total + weighted
                result.outputs.setdefault("predictions", inputs[0])
                continue
            values[name] = out = layer.forward(handler, inputs, params, context)
            if name in self._unchecked:
                check_output_shape(layer, out)
                self._unchecked.discard(name)
            external = getattr(layer, "external", None)
            if external is not None and layer.input_shapes:  # an Output layer
                result.outputs[external] = values[name]
        if "predictions" not in result.outputs:
            last = next(reversed([n for n, layer in self.layers.items() if not layer.is_cost]))
            result.outputs["predictions"] = values[last]
        result.cost = total
        return result

    def _plan(self) -> list:
        """(name, layer, source names, parameters by name) per layer, in order: built once per
        parameter set instead of on every forward pass."""
        if self._plan_cache is None or self._plan_cache[0] is not self.parameters:
            plan = [(name, layer, self._sources[name],
                     LayerParameters(layer, {**{param: self.parameters[f"{name}.{param}"]
                                                for param in layer.parameter_shapes},
                                             **{key: self.state[f"{name}.{key}"] for key in layer.state_shapes}}))
                    for name, layer in self.layers.items()]
            self._plan_cache = (self.parameters, plan)
        return self._plan_cache[1]

    @property
    def parameter_count(self) -> int:
        return sum(math.prod(shape) for layer in self.layers.values() for shape in layer.parameter_shapes.values())

    def state_dict(self) -> dict:
        """Every parameter and state array as a NumPy copy, by id (what checkpoints save)."""
        return {pid: array.to_numpy() for pid, array in (*self.parameters.items(), *self.state.items())}

    def load_state_dict(self, state: dict, partial: bool = False):
        """Overwrite parameters and state arrays from NumPy arrays (any handler, any dtype), in place; old
        parameter names are accepted. ``partial``: only the ids given, the others kept (data-parallel workers
        exchange the layer state alone every step)."""
        handler = self._require_handler()
        arrays = {**self.parameters, **self.state}
        state = with_current_ids(state, self.parameters)
        missing, extra = [] if partial else sorted(set(arrays) - set(state)), sorted(set(state) - set(arrays))
        if missing or extra:
            raise ArchitectureError(f"parameters do not match: missing {missing or 'none'}, "
                                    f"unexpected {extra or 'none'}")
        for pid, value in state.items():
            array = arrays[pid]
            if tuple(value.shape) != array.shape:
                raise ArchitectureError(f"parameter {pid!r}: shape {tuple(value.shape)} does not match {array.shape}")
            handler.fill(array, handler.asarray(value))

    def transfer_parameters_to(self, other: "Network"):
        """Copy this network's parameters into ``other`` (same layout, any handler)."""
        other.load_state_dict(self.state_dict())

    def copy(self, handler=None) -> "Network":
        """A deep copy with its own parameters, on ``handler`` (default: the same one)."""
        source = self._require_handler()
        twin = Network(copy.deepcopy(self.architecture), name=self.name)
        twin.handler = handler or source
        twin.parameters = {pid: twin.handler.asarray(a.to_numpy()) for pid, a in self.parameters.items()}
        twin.state = {key: twin.handler.asarray(a.to_numpy()) for key, a in self.state.items()}
        return twin

    def predict(self, inputs, batch_size: int = 1000) -> numpy.ndarray:
        """The ``predictions`` output for a batch of raw ``inputs`` (records on axis 0; :attr:`preprocessing` applies
        first), in inference mode, as NumPy."""
        handler = self._require_handler()
        external = next(layer.external for layer in self.layers.values()
                        if getattr(layer, "external", None) is not None and not layer.input_shapes)
        inputs = numpy.asarray(inputs)
        if inputs.ndim == 0 or len(inputs) == 0:
            raise SigmaError(f"network {self.name!r}: predict needs a batch of one or more records, got shape {inputs.shape}")
        if self.preprocessing is not None:
            inputs = self.preprocessing.inputs(inputs)
        inputs = inputs.astype(handler.dtype, copy=False)
        parts = []
        with handler.no_grad():
            for start in range(0, len(inputs), batch_size):
                batch = {external: handler.asarray(inputs[start:start + batch_size])}
                parts.append(self.forward(batch).outputs["predictions"].to_numpy())
        return numpy.concatenate(parts)

    def summary(self) -> str:
        """A table of layer, type, output shape and parameter count, with the total."""
        rows = [("layer", "type", "output shape", "parameters")] + [
            (name, type(layer).__name__, str(layer.output_shape),
             f"{sum(math.prod(s) for s in layer.parameter_shapes.values()):,}") for name, layer in self.layers.items()]
        rows.append(("total", "", "", f"{self.parameter_count:,}"))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [f"network {self.name!r}: {len(self.layers)} layers, {self.parameter_count:,} parameters"]
        lines += ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row[:3], widths)), row[3].rjust(widths[3])])
                  for row in rows]
        return "\n".join(lines)

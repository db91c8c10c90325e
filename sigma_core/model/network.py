"""Network: an architecture's layers built on a handler, with their parameters and state.

Parameter ids are ``"<layer>.<param>"`` (run values ``network.layers.<layer>.<param>``), which optimiser filters
and initialiser bindings match with glob patterns. Layer state (``Layer.state_shapes``) has ids of the same form,
in :attr:`Network.state`: saved and restored with the parameters (:meth:`Network.state_dict`), never trained.
"""

import copy
import math
from dataclasses import dataclass, field

import numpy

from sigma_core import plugins

from sigma_core.compute import memory
from sigma_core.model.architecture import Architecture, Construct
from sigma_core.errors import ArchitectureError, SigmaError, UnknownComponentError
from sigma_core.model.layers.base import ForwardContext, old_id


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


def parameter_count(layer) -> int:
    """The parameters the layer owns: one it shares with another layer counts there."""
    return sum(math.prod(shape) for p, shape in layer.parameter_shapes.items() if p not in layer.shared_parameters)


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
        #: Bumped when the network changes other than by training (new parameters, a layer attribute set), so
        #: that what holds on to its buffers or to what its layers did (a compiled step) knows to look again.
        self.version = 0
        #: The fitted ``preprocess`` transforms (a :class:`~sigma_core.data.Preprocessing`) of the run that
        #: trained it, which :meth:`predict` applies to raw inputs first; None: inputs go in as they are.
        self.preprocessing = None
        names = architecture.resolved_names()
        for construct in architecture.ordered():  # shape inference only: no arrays yet
            name = names[id(construct)]
            try:
                plugins.get("layer", construct.layer_type)
            except UnknownComponentError as error:  # named as in the summary, and by its run-file key
                raise ArchitectureError(f"{construct.where or f'layer {name!r}'}: {error}") from None
            self._sources[name] = sources = [names[id(s)] for s in construct.inputs]
            input_shapes = [self.layers[s].output_shape for s in sources]
            spec = {"type": construct.layer_type, **construct.params}
            self.layers[name] = layer = plugins.build("layer", spec, name, input_shapes, where=construct.where or name)
            layer._network = self
        for name, layer in self.layers.items():
            for param, pid in layer.shared_parameters.items():
                owner, _, owned = pid.rpartition(".")
                shape, declared = getattr(self.layers.get(owner), "parameter_shapes", {}).get(owned), \
                    layer.parameter_shapes.get(param)
                if declared is None or shape != declared or owned in self.layers[owner].shared_parameters:
                    raise ArchitectureError(f"layer {name!r}: its parameter {param!r} {declared or '(undeclared)'} "
                                            f"cannot share {pid!r} ({shape or 'no such parameter'})")
        self._inputs = [layer.external for layer in self.layers.values()
                        if getattr(layer, "external", None) is not None and not layer.input_shapes]
        if not self._inputs:
            raise ArchitectureError("the network has no input layer")
        results = [name for name, layer in self.layers.items() if not layer.is_cost]
        self._last = results[-1]  # its output is the predictions where no cost layer runs
        self._unchecked = set(results)  # layers whose first output is yet to be checked against their output_shape
        self._plan = []

    def check_memory(self, dtype, copies: int = 1) -> None:
        """Refuse parameters (times ``copies``: gradients, optimiser memory) that would not fit in the
        memory available, before allocating, naming the layer where they stop fitting."""
        itemsize, total = numpy.dtype(dtype).itemsize * copies, 0
        extra = " with their gradients and optimiser memory" if copies > 1 else ""
        for name, layer in self.layers.items():
            total += parameter_count(layer) * itemsize
            memory.require(total, f"layer {name!r}: the {dtype} parameters up to this layer{extra}", ArchitectureError)

    def initialise(self, handler, initialisers: dict | None = None) -> dict:
        """Create every parameter on ``handler`` and initialise it: ``initialisers`` (glob on parameter ids ->
        initialiser) win over each layer's defaults. Returns which pattern set which id."""
        from sigma_core.model.initialisers import apply_initialisers

        self.check_memory(handler.dtype)
        parameters, state, defaults = {}, {}, {}
        for name, layer in self.layers.items():
            for param, shape in layer.parameter_shapes.items():
                if param not in layer.shared_parameters:
                    parameters[f"{name}.{param}"] = handler.zeros(shape)
            initial = layer.initial_state()
            for key, shape in layer.state_shapes.items():
                state[f"{name}.{key}"] = handler.full(shape, initial.get(key, 0.0))
            defaults.update((f"{name}.{param}", initialiser)
                            for param, initialiser in layer.default_initialisers().items()
                            if param in layer.parameter_shapes and param not in layer.shared_parameters)
        self._adopt(handler, parameters, state)
        applied = apply_initialisers(handler, self.parameters, defaults)
        if initialisers:
            applied.update(apply_initialisers(handler, self.parameters, initialisers))
        return applied

    def _adopt(self, handler, parameters: dict, state: dict) -> None:
        """Take new parameter and state arrays on ``handler``, and plan each forward pass's lookups once:
        (name, layer, source names, parameters and state by name) per layer."""
        self.handler, self.parameters, self.state = handler, parameters, state
        self.version += 1
        self._plan = []
        for name, layer in self.layers.items():
            arrays = {param: parameters[layer.shared_parameters.get(param, f"{name}.{param}")]
                      for param in layer.parameter_shapes}
            arrays.update((key, state[f"{name}.{key}"]) for key in layer.state_shapes)
            self._plan.append((name, layer, self._sources[name], LayerParameters(layer, arrays)))

    def _require_handler(self):
        if self.handler is None:
            raise SigmaError(f"network {self.name!r} is not initialised; call network.initialise(handler)")
        return self.handler

    def forward(self, externals: dict, training: bool = False) -> ForwardResult:
        """Run every layer in order. Cost layers run when their targets are given."""
        handler = self._require_handler()
        context = ForwardContext(training=training, externals=externals)
        values, result, total = {}, ForwardResult(), None
        for name, layer, sources, params in self._plan:
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
                result.outputs[external] = out
        result.outputs.setdefault("predictions", values[self._last])
        result.cost = total
        return result

    @property
    def parameter_count(self) -> int:
        return sum(map(parameter_count, self.layers.values()))

    def state_dict(self) -> dict:
        """Every parameter and state array as a NumPy copy, by id (what checkpoints save)."""
        return {pid: array.to_numpy() for pid, array in (*self.parameters.items(), *self.state.items())}

    def load_state_dict(self, state: dict, partial: bool = False):
        """Overwrite parameters and state arrays from NumPy arrays (any handler, any dtype), in place; old
        parameter names are accepted. ``partial``: only the ids given, the others kept (data-parallel workers
        exchange the layer state alone every step)."""
        handler = self._require_handler()
        arrays, state = {**self.parameters, **self.state}, dict(state)
        for pid in self.parameters:
            if pid not in state and old_id(pid) in state:
                state[pid] = state.pop(old_id(pid))
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
        handler = handler or source
        twin = Network(copy.deepcopy(self.architecture), name=self.name)
        twin._adopt(handler, {pid: handler.asarray(a.to_numpy()) for pid, a in self.parameters.items()},
                    {key: handler.asarray(a.to_numpy()) for key, a in self.state.items()})
        return twin

    def predict(self, inputs, batch_size: int = 1000) -> numpy.ndarray:
        """The ``predictions`` output for a batch of raw ``inputs`` (records on axis 0; :attr:`preprocessing` applies
        first), in inference mode, as NumPy."""
        handler = self._require_handler()
        inputs = numpy.asarray(inputs)
        if inputs.ndim == 0 or len(inputs) == 0:
            raise SigmaError(f"network {self.name!r}: predict needs a batch of one or more records, "
                             f"got shape {inputs.shape}")
        if self.preprocessing is not None:
            inputs = self.preprocessing.inputs(inputs)
        inputs = inputs.astype(handler.dtype, copy=False)
        parts = []
        with handler.no_grad():
            for start in range(0, len(inputs), batch_size):
                batch = {self._inputs[0]: handler.asarray(inputs[start:start + batch_size])}
                parts.append(self.forward(batch).outputs["predictions"].to_numpy())
        return numpy.concatenate(parts)

    def summary(self) -> str:
        """A table of layer, type, output shape and parameter count, with the total."""
        rows = [("layer", "type", "output shape", "parameters")]
        rows += [(name, type(layer).__name__, str(layer.output_shape), f"{parameter_count(layer):,}")
                 for name, layer in self.layers.items()]
        rows.append(("total", "", "", f"{self.parameter_count:,}"))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [f"network {self.name!r}: {len(self.layers)} layers, {self.parameter_count:,} parameters"]
        lines += ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row[:3], widths)), row[3].rjust(widths[3])])
                  for row in rows]
        return "\n".join(lines)

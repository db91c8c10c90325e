"""The Layer interface every built-in and plugin layer implements.

A layer is built once per network from its construct's meta-parameters and its
inputs' per-sample shapes (never the batch axis), and declares its output and
parameter shapes; the network makes the parameters and passes them to
:meth:`Layer.forward`, which only calls handler ops: differentiable, on any backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ArchitectureError


@dataclass
class ForwardContext:
    """What a layer may need besides its inputs during one forward pass."""

    training: bool
    externals: dict = field(default_factory=dict)  # name -> NDArray fed from outside (an Input layer's external)


class Layer:
    """Base class: subclasses set ``output_shape`` and ``parameter_shapes`` in __init__.

    A layer may also set ``state_shapes`` (name -> shape): arrays it keeps from step to step that are not
    parameters (batch norm's running statistics). The network makes them (filled from :meth:`initial_state`),
    passes them to :meth:`forward` with the parameters, and saves and restores them with the parameters
    (``Network.state_dict``, checkpoints, ``sigma predict``); optimisers and weight decay never see them.
    forward changes them in place, with handler ops (an op of its own, ``handler.fill``), so a recorded step
    (sigmann-replay) repeats the change.
    """

    #: number of inputs the layer takes (None: one or more)
    arity: int | None = 1
    #: True for cost layers: forward returns a scalar cost, weighted by ``importance``
    is_cost = False

    #: The network the layer belongs to, set by :class:`~sigma_core.network.Network` when it builds the layer.
    _network = None

    def __setattr__(self, name, value):
        """Set an attribute, counting it as a change of the layer's network (:attr:`Network.version
        <sigma_core.network.Network.version>`): what holds on to what the layer did in earlier steps (a
        compiled training step) must look again after a web monitor sets dropout's ``p``, say."""
        object.__setattr__(self, name, value)
        network = self._network
        if network is not None:
            network.version += 1

    def __init__(self, name: str, input_shapes: list[tuple]):
        self.name = name
        self.input_shapes = [tuple(s) for s in input_shapes]
        if self.arity is not None and len(self.input_shapes) != self.arity:
            raise ArchitectureError(f"layer {name!r} ({type(self).__name__}) takes {self.arity} input(s), "
                                    f"got {len(self.input_shapes)}")
        if self.arity is None and not self.input_shapes:
            raise ArchitectureError(f"layer {name!r} ({type(self).__name__}) takes one or more inputs, got none")
        self.output_shape: tuple = self.input_shapes[0] if self.input_shapes else ()
        self.parameter_shapes: dict[str, tuple] = {}
        self.state_shapes: dict[str, tuple] = {}

    @property
    def input_shape(self) -> tuple:
        return self.input_shapes[0]

    def default_initialisers(self) -> dict:
        """Initialiser per parameter name, used where no trainer binding matches."""
        return {}

    def initial_state(self) -> dict:
        """The value (a number) each state array starts at, by name; one not named here starts at 0."""
        return {}

    def forward(self, handler, inputs: list, params: dict, context: ForwardContext):
        """The output, from the inputs and ``params`` (the parameters and the state arrays, by name)."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name}: {type(self).__name__} -> {self.output_shape}"


#: Parameter names changed since checkpoints were first written: current name -> old name.
OLD_PARAMETER_NAMES = {"biases": "bias"}  # Elementwise's scalar bias, before every bias was "biases"


def old_id(pid: str) -> str | None:
    """The id parameter ``pid`` had before a rename (in older checkpoints), or None."""
    layer, dot, name = pid.rpartition(".")
    old = OLD_PARAMETER_NAMES.get(name)
    return layer + dot + old if old else None


def with_current_ids(state: dict, ids) -> dict:
    """``state`` (keyed by parameter id) with entries under an old id of one of ``ids`` moved to the current id."""
    state = dict(state)
    for pid in ids:
        old = old_id(pid)
        if pid not in state and old in state:
            state[pid] = state.pop(old)
    return state

"""The Layer interface every built-in and plugin layer implements (the contract: docs/plugins.md, "Layer")."""

from dataclasses import dataclass, field

from sigma_core.errors import ArchitectureError


@dataclass
class ForwardContext:
    """What a layer may need besides its inputs during one forward pass."""

    training: bool
    externals: dict = field(default_factory=dict)  # name -> NDArray fed from outside (an Input layer's external)


class Layer:
    """Built once per network from its construct's arguments and its inputs' per-record shapes (no batch axis).

    Subclasses set ``output_shape`` and ``parameter_shapes`` (name -> shape) in ``__init__``, and may set
    ``state_shapes``: arrays kept from step to step that are not parameters (batch norm's running statistics),
    which the network makes (from :meth:`initial_state`), passes to :meth:`forward` beside the parameters, and
    saves and restores with them, but never trains. ``shared_parameters`` (name -> another layer's parameter id,
    ``"<layer>.<param>"``) ties a declared parameter to that one (weight tying): the network makes, trains, saves
    and counts it once, under the owner's id, and the gradients of both uses add up in it. :meth:`forward` only
    calls handler ops, so it is differentiable on every handler and changes its state in place with them (so a
    recorded step repeats it).
    """

    #: number of inputs the layer takes (None: one or more)
    arity: int | None = 1
    #: True for cost layers: forward returns a scalar cost, weighted by ``importance``
    is_cost = False
    #: The network that built the layer, whose ``version`` each attribute set bumps (see :meth:`__setattr__`).
    _network = None

    def __setattr__(self, name, value):
        """Set an attribute and count it as a change of the network: what holds on to what the layer did
        (a compiled training step) must look again after a web monitor sets dropout's ``p``, say."""
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
        self.shared_parameters: dict[str, str] = {}

    @property
    def input_shape(self) -> tuple:
        return self.input_shapes[0]

    def default_initialisers(self) -> dict:
        """Initialiser per parameter name, used where no run-file binding matches."""
        return {}

    def initial_state(self) -> dict:
        """The value (a number) each state array starts at, by name; one not named here starts at 0."""
        return {}

    def forward(self, handler, inputs: list, params: dict, context: ForwardContext):
        """The output, from the inputs and ``params`` (the parameters and the state arrays, by name)."""
        raise NotImplementedError


def old_id(pid: str) -> str | None:
    """The id parameter ``pid`` has in checkpoints written before Elementwise's ``bias`` became ``biases``."""
    return pid.removesuffix("biases") + "bias" if pid.endswith(".biases") else None

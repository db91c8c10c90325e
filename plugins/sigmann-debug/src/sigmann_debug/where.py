"""Where in a run an op is running: its layer (name and index) and the trainer's epoch and iteration.

The core tells a handler none of this, and need not: a layer's ops run inside ``Layer.forward``, called by
``Network.forward``, inside the ``Trainer``'s step, so the calling frames say it. Reading them costs nothing when
the debug handler is not chosen, and under it a few frames per op (the layer is read as each op runs, for its VJP's
report later; the trainer only when there is something to report).
"""

import sys
from dataclasses import dataclass

from sigma_core import Layer, Network, Trainer


@dataclass(frozen=True)
class Place:
    """The layer an op ran in, and the network that ran it (None for either: the op ran outside them)."""

    layer: Layer | None = None
    network: Network | None = None

    def __str__(self):
        if self.layer is None:
            return "outside every layer"
        index = list(self.network.layers).index(self.layer.name) if self.network is not None else "?"
        return f"in layer {self.layer.name!r} (#{index}, {type(self.layer).__name__})"


NOWHERE = Place()


def current_place(skip: int = 2) -> Place:
    """The :class:`Place` of the op running now (``skip``: frames of the debug handler's own above the caller)."""
    frame, layer = sys._getframe(skip), None
    while frame is not None:
        if frame.f_code.co_name == "forward":
            owner = frame.f_locals.get("self")
            if isinstance(owner, Network):
                return Place(layer, owner)
            if layer is None and isinstance(owner, Layer):
                layer = owner
        frame = frame.f_back
    return Place(layer) if layer is not None else NOWHERE


def current_step() -> str:
    """``"trainer 'digits', epoch 1, iteration 3"`` (counted as the trainer's own errors count them), or
    ``"outside training"``: read from the trainer whose step calls the op now."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_name in _STEP_METHODS else None
        if isinstance(owner, Trainer):
            return f"trainer {owner.name!r}, epoch {owner.epoch + 1}, iteration {owner.iteration + 1}"
        frame = frame.f_back
    return "outside training"


#: The trainer's methods a step's ops run under (forward and backward both run inside ``gradients``).
_STEP_METHODS = ("gradients", "training_step", "apply_gradients", "evaluate")

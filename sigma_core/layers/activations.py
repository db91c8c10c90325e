"""Activation functions by name: the built-ins and those plugins register.

The built-ins (``relu``/``rel``, ``sigmoid``, ``tanh``, ``softplus``,
``none``/``linear``) are fused into the dense kernel. A plugin activation is a
callable ``f(handler, x) -> NDArray`` written with handler ops; it is applied
after an un-fused dense product and differentiated automatically.
"""

from __future__ import annotations

from .. import plugins
from ..errors import ConfigError, UnknownComponentError


class BuiltinActivation:
    """An activation the kernels implement natively (fused into dense)."""

    def __init__(self, kernel_name: str):
        self.kernel_name = kernel_name

    def __call__(self, handler, x):
        if self.kernel_name == "none":
            return x
        return getattr(handler, self.kernel_name)(x)

    def __repr__(self):
        return f"<builtin activation {self.kernel_name}>"


NONE = BuiltinActivation("none")
RELU = BuiltinActivation("relu")
SIGMOID = BuiltinActivation("sigmoid")
TANH = BuiltinActivation("tanh")
SOFTPLUS = BuiltinActivation("softplus")


def resolve_activation(name: str, layer: str):
    """The activation registered as ``name``; the error names the layer and lists the choices."""
    try:
        return plugins.load("activation", name or "none")
    except UnknownComponentError as error:
        raise ConfigError(f"layer {layer!r}: {error}") from None

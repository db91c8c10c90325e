"""Activation functions by name: the built-ins, which dense fuses into its kernel, and those plugins register
(a callable ``f(handler, x) -> NDArray`` over handler ops, applied after an un-fused dense product)."""

from dataclasses import dataclass

from sigma_core import plugins
from sigma_core.errors import ConfigError, UnknownComponentError


@dataclass(frozen=True)
class BuiltinActivation:
    """An activation the kernels implement natively, as the handler op ``kernel_name``."""

    kernel_name: str

    def __call__(self, handler, x):
        return x if self.kernel_name == "none" else getattr(handler, self.kernel_name)(x)


NONE, RELU, SIGMOID, TANH, SOFTPLUS = map(BuiltinActivation, ["none", "relu", "sigmoid", "tanh", "softplus"])


def resolve_activation(name: str, layer: str):
    """The activation registered as ``name``; the error names the layer and lists the choices."""
    try:
        return plugins.load("activation", name or "none")
    except UnknownComponentError as error:
        raise ConfigError(f"layer {layer!r}: {error}") from None

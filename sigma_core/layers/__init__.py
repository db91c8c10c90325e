"""Layers: the forward pass of each layer type; gradients come from autodiff.

A layer type is a :class:`~sigma_core.layers.base.Layer` subclass registered
under a name through the ``register_layers`` hook (the built-ins are in
:mod:`sigma_core.builtins`). Networks are described with constructs
(:mod:`sigma_core.architecture`) and instantiate layers on a handler.
"""

from .base import ForwardContext, Layer

__all__ = ["ForwardContext", "Layer"]

"""Layers: each layer type's forward pass over handler ops (autodiff gives the gradients). The built-in types
are registered in :mod:`sigma_core.builtins`, plugin types through the ``register_layers`` hook."""

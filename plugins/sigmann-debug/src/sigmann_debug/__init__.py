"""Debugging tools for Sigma: the ``debug`` handler, which names the first op that makes a NaN, an infinity, a
wrong shape or too large a value (layer, forward or backward, iteration, element), and target maximisation
(``sigma dream``): the input a trained network takes for a class."""

import importlib

#: The public names and the module each comes from, imported when first used: Sigma imports this package (for its
#: plugin module) to build every ``sigma`` command's parser, which must not pay for NumPy. The function ``dream`` is
#: ``sigmann_debug.dream.dream`` (the module of that name would shadow it here).
_PUBLIC = {"Checks": "checks", "DebugHandler": "handler", "DreamResult": "dream", "Settings": "settings"}
__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'sigmann_debug' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sigmann_debug.{_PUBLIC[name]}"), name)

"""Sigma: a plugin-based machine-learning framework you can read in an afternoon.

Start reading at :mod:`sigma_core.hookspecs`, the plugin contract. ``import sigma_core``
must be cheap (every ``sigma`` command pays for it), so the names below are imported on first use.
"""

import importlib
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("sigmann")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

_LAZY = {  # a plugin author needs only these: hookimpl, Layer, ForwardContext, default_weight_initialisers
    "hookimpl": "sigma_core.hookspecs",
    **dict.fromkeys(["Layer", "ForwardContext"], "sigma_core.layers.base"),
    "default_weight_initialisers": "sigma_core.layers.dense",
    "Initialiser": "sigma_core.initialisers",
    **dict.fromkeys(["create_handler", "use_handler", "set_default_handler"], "sigma_core.backend"),
    **dict.fromkeys(["Construct", "Architecture"], "sigma_core.architecture"),
    "Network": "sigma_core.network",
    "load": "sigma_core.inference",
    "Trainer": "sigma_core.trainer",
    "Environment": "sigma_core.environment",
    **dict.fromkeys(["Input", "Output", "Dense", "Dropout", "Elementwise", "Recurrent", "LSTM", "Concatenate", "Add",
                     "SoftmaxCE", "SquaredDifference"], "sigma_core.constructs"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sigma_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

"""Sigma: a plugin-based machine-learning framework you can read in an afternoon.

Imports here stay lazy: ``import sigma_core`` must be cheap, because every
``sigma`` command and every plugin discovery pays for it. The pieces live in
their own modules:

- :mod:`sigma_core.hookspecs` — the plugin contract (``hookimpl``)
- :mod:`sigma_core.plugins` — discovery and the component registry
- :mod:`sigma_core.backend` — choosing a computation handler
- :mod:`sigma_core.handler`, :mod:`sigma_core.kernels` — the handler interface
- :mod:`sigma_core.constructs`, :mod:`sigma_core.network` — describing networks
- :mod:`sigma_core.trainer`, :mod:`sigma_core.run` — training
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("sigmann")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

#: Public names importable from ``sigma_core`` directly, resolved on first use
#: (PEP 562) so that ``import sigma_core`` itself imports nothing heavy.
_LAZY = {
    "hookimpl": "sigma_core.hookspecs",
    "create_handler": "sigma_core.backend",
    "use_handler": "sigma_core.backend",
    "set_default_handler": "sigma_core.backend",
    "Construct": "sigma_core.architecture",
    "Architecture": "sigma_core.architecture",
    "Network": "sigma_core.network",
    "Trainer": "sigma_core.trainer",
    "Environment": "sigma_core.environment",
    "Input": "sigma_core.constructs",
    "Output": "sigma_core.constructs",
    "Dense": "sigma_core.constructs",
    "Dropout": "sigma_core.constructs",
    "Elementwise": "sigma_core.constructs",
    "Recurrent": "sigma_core.constructs",
    "LSTM": "sigma_core.constructs",
    "Concatenate": "sigma_core.constructs",
    "Add": "sigma_core.constructs",
    "SoftmaxCE": "sigma_core.constructs",
    "SquaredDifference": "sigma_core.constructs",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sigma_core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

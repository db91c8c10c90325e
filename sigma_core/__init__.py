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

"""Sigma: a plugin-based machine-learning framework you can read in an afternoon.

Imports here stay lazy: ``import sigma_core`` must be cheap, because every
``sigma`` command and every plugin discovery pays for it.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("sigmann")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

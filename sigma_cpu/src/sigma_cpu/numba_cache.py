"""Where numba keeps the compiled kernels on disk, decided before numba compiles anything.

The kernels are compiled with ``cache=True``, so only the first process on a
machine pays the compile cost (several seconds); later ones load machine code
from disk in milliseconds. By default numba writes that cache into
``__pycache__`` next to :mod:`sigma_cpu.kernels`, which fails when the package
lives in a read-only site-packages (system installs, containers). Then the
cache goes to a per-user directory instead, chosen here. Precedence:

1. ``SIGMA_NUMBA_CACHE_DIR``: Sigma's own setting, to move the cache anywhere;
2. ``NUMBA_CACHE_DIR``: numba's setting, if the user made one, is respected;
3. the package directory, when it is writable (numba's default);
4. ``<platformdirs.user_cache_dir("sigmann")>/numba`` otherwise.

:func:`configure` runs when :mod:`sigma_cpu.kernels` is imported, before its
kernels are defined. numba reads ``NUMBA_CACHE_DIR`` when it is imported, so
if something imported numba earlier the setting is also written into
``numba.config`` directly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def choose_cache_dir(environ, package_writable: bool) -> str | None:
    """The directory numba should cache into, or None to leave numba's default.

    Pure (no side effects), so the precedence above is testable without numba.
    """
    explicit = environ.get("SIGMA_NUMBA_CACHE_DIR")
    if explicit:
        return explicit
    if environ.get("NUMBA_CACHE_DIR") or package_writable:
        return None
    import platformdirs

    return str(Path(platformdirs.user_cache_dir("sigmann")) / "numba")


def package_writable(directory: Path = PACKAGE_DIR) -> bool:
    """Whether numba can write its in-tree cache (``__pycache__``) next to the kernels."""
    pycache = directory / "__pycache__"
    target = pycache if pycache.exists() else directory
    return os.access(target, os.W_OK)


def configure() -> str | None:
    """Apply :func:`choose_cache_dir` to the environment (and numba, if imported); returns the choice."""
    chosen = choose_cache_dir(os.environ, package_writable())
    if chosen is not None:
        os.environ["NUMBA_CACHE_DIR"] = chosen
        if "numba" in sys.modules:
            sys.modules["numba"].config.CACHE_DIR = chosen
    return chosen

"""numba's disk cache for the kernels: where it lives (decided before numba compiles anything) and how it loads.

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

:func:`import_numba` runs :func:`configure` before it imports numba (the
modules of this package import numba through it). numba reads
``NUMBA_CACHE_DIR`` when it is imported, so if something imported numba
earlier the setting is also written into ``numba.config`` directly.

:func:`cached` turns the cache on for one compiled function. Loading from it
skips numba's registry refresh (see :func:`_lean_cache_class`), which is most
of what a process with a warm cache pays for using numba at all.
"""

from __future__ import annotations

import functools
import gc
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


def import_numba():
    """numba, imported after :func:`configure`, without the garbage collector rescanning the process meanwhile.

    Importing numba creates some 100,000 objects, enough for several full
    collections, and each one walks every object the process already holds:
    after scikit-learn, SciPy and pandas, that was ~60 ms of numba's 0.17 s
    import. So the objects that exist before are frozen (``gc.freeze``: left
    out of collections) for the import and unfrozen after it, unless the
    program froze some itself (then its choice stands).
    """
    configure()
    if "numba" in sys.modules:
        return sys.modules["numba"]
    freezing = gc.get_freeze_count() == 0
    if freezing:
        gc.freeze()
    try:
        import numba
    finally:
        if freezing:
            gc.unfreeze()
    return numba


@functools.cache
def _lean_cache_class():
    """numba's ``FunctionCache``, except that loading machine code initialises only numba's runtime (NRT).

    numba's own ``load_overload`` first refreshes its typing and lowering
    registries: it imports and registers ~250 modules of numba's
    implementations, 0.25 s on the first load of a process, although machine
    code from the disk needs none of them, only the runtime's symbols it links
    against. Compiling (a cache miss) still refreshes everything, in numba's
    compiler. Returns None when this numba lacks the two methods used here
    (they are numba's, not public): then :func:`cached` keeps numba's loading.
    """
    from numba.core import caching
    from numba.core.runtime import nrt

    if not all(hasattr(caching.Cache, name) for name in ("_guard_against_spurious_io_errors", "_load_overload")):
        return None

    class LeanFunctionCache(caching.FunctionCache):
        def load_overload(self, sig, target_context):
            nrt.rtsys.initialize(target_context)  # idempotent; the symbols loaded machine code links against
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
            # None (an I/O error swallowed, as numba does): the dispatcher compiles instead

    return LeanFunctionCache


def cached(compiled, function=None):
    """``compiled`` (a ``numba.njit`` dispatcher, or a ``CFunc`` of ``function`` not compiled yet) with its disk
    cache on, as ``cache=True`` would, loading leanly."""
    lean = _lean_cache_class()
    if lean is None:
        compiled.enable_caching()
    else:  # what enable_caching sets, with the lean loading
        compiled._cache = lean(compiled.py_func if function is None else function)
    return compiled

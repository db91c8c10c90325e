"""Sigma's numba CPU handler (a separate distribution, ``sigmann-cpu``).

Installing it registers the ``cpu`` handler through the ``sigma`` entry-point
group (see :mod:`sigma_cpu.plugin`); ``auto`` then prefers it over the NumPy
handler. Removing it changes nothing else. Importing this package imports
neither numba nor the handler: :mod:`sigma_cpu.handler` does, on first use.
"""

import importlib

#: What a plugin's numba kernels for the ``cpu`` handler build on (the ``cpu`` kernel of an op it registers
#: through ``register_ops``), imported on first use as they import numba:
#: the compiler's fast-math flags, a ``prange`` loop compiled serial and parallel, the choice between the two
#: for an array size, and the contiguity check every compiled kernel makes before it runs. And, for benchmarks
#: and tests that time or delete a numba cache directory, the wait for its precompiling helper to finish.
_LAZY = {"FASTMATH": "kernels:FASTMATH", "serial_and_parallel": "kernels:_serial_and_parallel",
         "pick": "kernels:_pick", "c_contiguous": "kernels:_c_contiguous", "wait_for_precompile": "precompile:wait"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'sigma_cpu' has no attribute {name!r}")
    module, attribute = _LAZY[name].split(":")
    value = getattr(importlib.import_module(f"sigma_cpu.{module}"), attribute)
    globals()[name] = value
    return value

"""Sigma's test kit for plugin and backend authors (distribution ``sigmann-testing``).

:func:`check_layer` (:mod:`sigmann_testing.layers`) checks a layer's shapes,
determinism and gradients on every installed handler.
:mod:`sigmann_testing.conformance` holds the handler conformance kit: a pytest
base class that a backend subclasses in its own test suite to check that it
computes what the numpy reference handler computes, that every gradient is
right (the core's ops and every op a plugin registers), and that it honours
Sigma's dtype, random-number and session contracts; :func:`check_op`
(:mod:`sigmann_testing.ops`) runs its checks of one op, and the op buffer rule,
on every installed handler: what an op distribution's own tests call. :class:`OptimiserChecks`
(:mod:`sigmann_testing.optimisers`) checks optimisers against NumPy references, freezing, checkpoints and
warm-step allocations. :func:`fuzz_loader`
(:mod:`sigmann_testing.loaders`) feeds a file loader seeded corruptions of a valid file.
:class:`ArrayCensus` (:mod:`sigmann_testing.census`) checks that a run's handler arrays do not pile up
from epoch to epoch. :func:`default_ctrl_c` (:mod:`sigmann_testing.processes`) lets a child process a test
interrupts take Ctrl-C even when the suite runs with SIGINT ignored (``nohup``, a background job).

The distribution is a pytest plugin (:mod:`sigmann_testing.plugin`), so pytest
imports this package in every session of the environment: the names below are
imported on first use, and a session that never uses the kit pays nothing for it.
"""

import importlib

_LAZY = {
    **dict.fromkeys(["CASES", "TOLERANCES", "HandlerConformance", "OpCase", "op_cases", "differentiable_ops",
                     "missing_gradient_cases"], "sigmann_testing.conformance"),
    **dict.fromkeys(["check_layer", "available_handlers"], "sigmann_testing.layers"),
    "check_op": "sigmann_testing.ops",
    "OptimiserChecks": "sigmann_testing.optimisers",
    **dict.fromkeys(["fuzz_loader", "mutants"], "sigmann_testing.loaders"),
    **dict.fromkeys(["ArrayCensus", "Prober", "live_arrays"], "sigmann_testing.census"),
    "default_ctrl_c": "sigmann_testing.processes",
}

__all__ = list(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sigmann_testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

"""Data-parallel training on one machine: the ``threads`` operator, and what other operators build on.

The entry point registers the operator ``threads`` (alias ``multithreaded``)
lazily, so plugin discovery imports nothing heavy. The names below are this
distribution's public API, imported on first use: :class:`ThreadsOperator`
(:mod:`sigmann_threads.threads`), the pieces every data-parallel worker is
made of (:mod:`sigmann_threads.workers`: :class:`Worker`, :func:`shard_bounds`,
:func:`base_seed`, :func:`worker_seed`, :func:`blas_threads`,
:class:`WorkerError`, :func:`worker_failed`; sigmann-ray's workers are these,
in other processes) and the mergers (:mod:`sigmann_threads.mergers`).
"""

import importlib

from sigma_core import hookimpl

_LAZY = {
    "ThreadsOperator": "sigmann_threads.threads",
    **dict.fromkeys(["Worker", "WorkerError", "worker_failed", "shard_bounds", "base_seed", "worker_seed",
                     "blas_threads"], "sigmann_threads.workers"),
    **dict.fromkeys(["AverageMerger", "WeightedMerger"], "sigmann_threads.mergers"),
}

__all__ = list(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sigmann_threads' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


@hookimpl
def register_operators(register):
    register("threads", "sigmann_threads.threads:ThreadsOperator", aliases=("multithreaded",),
             description="data-parallel workers on threads, each with its own handler; gradient or model averaging")

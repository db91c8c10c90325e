"""What every data-parallel worker is made of, in this process (``threads``) or another (``ray``).

A worker wraps a local trainer (a replica of the global one, or in another
process its own) and trains on its share of every global minibatch:
contiguous rows, sizes differing by at most one (:func:`shard_bounds`). Its
random stream restarts every step from (seed, worker, step)
(:func:`worker_seed`), so a repeated step repeats exactly and no checkpoint
needs it. A worker's failure reaches the driver as one line naming the worker
(:func:`worker_failed`). While workers train, BLAS keeps to a few threads
(:func:`blas_threads`): the workers are the parallelism.
"""

from __future__ import annotations

import contextlib

import numpy

from sigma_core import NonFiniteError, SigmaError, describe


class WorkerError(SigmaError):
    """A worker failed; the message names it and its error."""


def worker_failed(index: int, error: BaseException) -> SigmaError:
    """The error the driver raises for worker ``index``'s ``error`` (a non-finite cost stays a NonFiniteError)."""
    return (NonFiniteError if isinstance(error, NonFiniteError) else WorkerError)(
        f"worker {index} failed: {describe(error)}")


def shard_bounds(records: int, workers: int) -> list[int]:
    """Row bounds of each worker's shard: sizes differ by at most one, in worker order."""
    return [index * records // workers for index in range(workers + 1)]


def base_seed(handler) -> int:
    """The run's seed (the handler's), or fresh entropy for an unseeded run."""
    return handler.seed if isinstance(handler.seed, int) else numpy.random.SeedSequence().entropy


def worker_seed(base: int, index: int, step: int) -> int:
    """The seed of worker ``index``'s random stream at global ``step``."""
    return int(numpy.random.SeedSequence([base, index, step]).generate_state(1)[0])


def blas_threads(count: int):
    """A context that limits BLAS to ``count`` threads (none for 0)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(count, user_api="blas") if count else contextlib.nullcontext()


class Worker:
    """One worker around its local trainer (a replica, or in another process its own)."""

    def __init__(self, trainer, index: int, seed: int):
        self.trainer, self.index, self.seed = trainer, index, seed

    def prepare(self, step: int, epoch: int, iteration: int) -> None:
        """Counters of global step ``step``, and this worker's random stream for it."""
        local, handler = self.trainer, self.trainer.handler
        seed = worker_seed(self.seed, self.index, step)  # a fresh handler's random state, by the public API:
        handler.set_rng_state(type(handler)(dtype=handler.dtype, seed=seed).rng_state())
        local.epoch, local.iteration, local.total_iterations = epoch, iteration, step

    def train(self, shard: dict, counters: tuple) -> float:
        """One local step (model averaging: the worker's own optimiser) at global ``counters``; returns the cost."""
        self.prepare(*counters)
        return float(self.trainer.run_iteration(shard))

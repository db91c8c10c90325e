"""Data parallelism on one machine: the ``threads`` operator (Sigma's multithreaded CPU operator).

The global state is the trainer (network, optimiser, counters, iterators, on
its handler): what hooks read, monitors see and checkpoints save. Each worker
has a local copy (:meth:`~sigma_core.trainer.Trainer.replica`) on its own
handler of the trainer's class and dtype, and trains on its share of every
global minibatch (contiguous rows, :func:`shard_bounds`). Worker 0 runs on the
training thread, the others on a pool; the global ``iteration`` event fires
once every worker has finished.

``combine = "gradients"`` (default, synchronous data parallelism): each worker
takes the gradients of its shard at the global parameters (host handlers
read them in place) weighted by its share of the records; the workers then
add them up, each a slice of every parameter, and the trainer's optimiser
applies the sum once. That equals one worker on the whole batch up to
rounding; the global state is complete after every step, so checkpoints
resume exactly, and local hooks run once, on it, before the global ones.

``combine = "models"`` (Sigma's model averaging): each worker steps its own
optimiser and runs its own copies of the local hooks (their start and
iteration events); every ``every`` iterations, at each epoch's end and when a
run is interrupted, worker parameters and optimiser memory are averaged into
the trainer (:class:`~sigma_core.mergers.AverageMerger`) and the workers take
that back, with the trainer's hyperparameters (``set`` and global hooks change
those). Global hooks and a paused run see the last merge; a resume is exact
from a checkpoint taken at a merge (every epoch's is).

Worker random streams restart every step from (seed, worker, step), so they
need no checkpoint. During a run BLAS gets ``blas_threads`` threads (with
threadpoolctl), and so do the ``cpu`` handler's kernels: the workers are the
parallelism, and more threads would fight them for the cores (the global
update between steps too: on a loaded machine a parallel one waits for a
descheduled thread). Everything else (states, signals, commands, monitors)
is the single worker's.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy

from .errors import ConfigError, NonFiniteError, SigmaError, describe
from .hooks.dispatch import HookDispatcher
from .hooks.timestep import TimeScale
from .mergers import AverageMerger
from .operators import SingleWorkerOperator

log = logging.getLogger("sigma")
COMBINE = ("gradients", "models")


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
    """A context that limits BLAS to ``count`` threads (none for 0, or without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(count, user_api="blas") if count else contextlib.nullcontext()


class Worker:
    """One worker around its local trainer (a replica, or in another process its own)."""

    def __init__(self, trainer, index: int, seed: int):
        self.trainer, self.index, self.seed = trainer, index, seed
        self.dispatcher = None  # model averaging: this worker's copies of the local hooks

    def prepare(self, step: int, epoch: int, iteration: int) -> None:
        """Counters of global step ``step``, and this worker's random stream for it."""
        local, handler = self.trainer, self.trainer.handler
        seed = worker_seed(self.seed, self.index, step)  # a fresh handler's random state, by the public API:
        handler.set_rng_state(type(handler)(dtype=handler.dtype, seed=seed).rng_state())
        local.epoch, local.iteration, local.total_iterations = epoch, iteration, step

    def train(self, shard: dict, counters: tuple, share: float) -> float:
        """One local step of model averaging, then the local hooks; returns the cost."""
        self.prepare(*counters)
        cost = float(self.trainer.run_iteration(shard))
        if self.dispatcher is not None:
            self.dispatcher.event(TimeScale.ITERATION)
        return cost


class ThreadsOperator(SingleWorkerOperator):
    """``workers`` data-parallel workers on threads of this process; see the module docstring."""

    argument_rules = {"workers": "int >= 1", "every": "int >= 1", "blas_threads": "int >= 0"}

    def __init__(self, trainer, *, epochs: int, hooks=(), monitors=(), workers: int = 2,
                 combine: str = "gradients", every: int = 1, blas_threads: int = 1):
        if combine not in COMBINE:
            raise ConfigError(f"operator.combine must be one of {', '.join(COMBINE)}, got {combine!r}")
        if trainer.handler is None:
            raise SigmaError(f"trainer {trainer.name!r}: initialise it before building its operator")
        if workers > (os.cpu_count() or 1):
            log.warning("operator threads: %d workers on %d CPUs; they will share cores", workers, os.cpu_count())
        self.combine, self.every, self.blas_threads = combine, every, blas_threads
        self.local_hooks = []
        super().__init__(trainer, epochs=epochs, monitors=monitors)
        self.attach_hook(*hooks)
        handler, base = trainer.handler, base_seed(trainer.handler)  # worker handlers are reseeded every step
        self.workers = [Worker(trainer.replica(type(handler)(dtype=handler.dtype), f"{trainer.name}/worker{index}"),
                               index, base) for index in range(workers)]
        self._pool = ThreadPoolExecutor(max(1, workers - 1), thread_name_prefix=f"sigma-worker-{trainer.name}")
        # Gradient averaging: each worker's (share, flat gradients), their weighted sums, a scratch array each.
        largest = max(trainer.network.parameters.values(), key=lambda array: array.size)
        self._host = handler.host_view(largest) is not None  # the workers' handlers are of the same class
        self._parts, self._sums = [None] * workers, {}
        self._scratch = [numpy.empty(largest.size, handler.dtype) for _ in range(workers)]
        self._unmerged = 0  # model averaging: local iterations since the last merge

    def attach_hook(self, *hooks) -> list:
        """With model averaging, local hooks go to the workers (each its own copies), global ones here."""
        if self.combine == "models":
            self.local_hooks += [hook for hook in hooks if hook.target == "local"]
            hooks = [hook for hook in hooks if hook.target != "local"]
        return super().attach_hook(*hooks)

    def _loop(self) -> None:
        self._pull()
        try:
            with blas_threads(self.blas_threads):
                super()._loop()
        finally:
            for worker in self.workers:
                dispatcher, worker.dispatcher = worker.dispatcher, None
                if dispatcher is not None:
                    dispatcher.close()

    def _start_local_hooks(self) -> None:
        """Model averaging: each worker's own copies of the local hooks, started at its first iteration of a run."""
        for worker in self.workers:
            worker.dispatcher = HookDispatcher(self)
            worker.dispatcher.attach(*copy.deepcopy(self.local_hooks))
            worker.dispatcher.start(worker.trainer, time.perf_counter())

    def _epoch(self) -> None:
        super()._epoch()
        if self._unmerged:  # interrupted by a stop or reset: the global state takes the work done
            self._merge()

    def _reset(self) -> None:
        super()._reset()
        self._pull()

    def _step(self, batch: dict):
        """One global iteration: every worker on its shard (worker 0 on this thread), then the combination."""
        trainer, models = self.trainer, self.combine == "models"
        if models and self.local_hooks and self.workers[0].dispatcher is None:
            self._start_local_hooks()
        records = len(batch["inputs"])
        bounds = shard_bounds(records, len(self.workers))
        counters = (trainer.total_iterations, trainer.epoch, trainer.iteration)
        work = [(worker, {key: values[start:stop] for key, values in batch.items()}, (stop - start) / records)
                for worker, start, stop in zip(self.workers, bounds, bounds[1:]) if stop > start]
        barrier = threading.Barrier(len(work))
        calls = [functools.partial(worker.train if models else self._gradients, shard, counters, share,
                                   *(() if models else (worker, position, len(work), barrier)))
                 for position, (worker, shard, share) in enumerate(work)]
        # Each in a copy of this thread's context: NumPy's error state (errstate) holds there.
        futures = [self._pool.submit(contextvars.copy_context().run, call) for call in calls[1:]]
        costs, failure = [], None
        for (worker, *_), outcome in zip(work, [calls[0], *(future.result for future in futures)]):
            try:  # every worker finishes before one failure is raised
                costs.append(outcome())
            except threading.BrokenBarrierError:
                pass  # another worker failed
            except Exception as error:
                failure = failure or worker_failed(worker.index, error)
        if failure is not None:
            raise failure
        cost = sum(share * result for (*_, share), result in zip(work, costs))
        if not models:
            return trainer.apply_gradients(self._sums, cost)
        self._unmerged += 1
        if self._unmerged >= self.every or trainer.iteration + 1 >= len(trainer.training_iterator):
            self._merge()
        return trainer.count_iteration(cost)

    def _gradients(self, shard: dict, counters: tuple, share: float, worker: Worker, position: int, count: int,
                   barrier: threading.Barrier) -> float:
        """Worker ``position`` of ``count``: its shard's gradients; once all have theirs (``barrier``), its slice
        of every parameter's weighted sum into ``self._sums``. Host workers read the global parameters in place
        (nothing changes them before every worker has finished); device workers copy them in and out."""
        worker.prepare(*counters)
        local, handler = worker.trainer, worker.trainer.handler
        try:
            with handler.session():
                if self._host:
                    for pid, array in local.network.parameters.items():
                        handler.share(array, self.trainer.handler.host_view(self.trainer.network.parameters[pid]))
                else:
                    local.network.load_state_dict(self.trainer.network.state_dict())
                cost, grads = local.gradients(shard)
                self._parts[position] = (share, [(handler.host_view(grad) if self._host else grad.to_numpy())
                                                  .reshape(-1) for grad in grads.values()])
                if position == 0 and [(pid, a.shape) for pid, a in self._sums.items()] != [
                        (pid, grad.shape) for pid, grad in grads.items()]:
                    dtype = self.trainer.handler.dtype
                    self._sums = {pid: numpy.empty(grad.shape, dtype) for pid, grad in grads.items()}
                barrier.wait()
                (weight, first), *others = self._parts[:count]
                for index, total in enumerate(self._sums.values()):
                    bounds = shard_bounds(total.size, count)
                    part = slice(bounds[position], bounds[position + 1])
                    out, scratch = total.reshape(-1)[part], self._scratch[position][:part.stop - part.start]
                    numpy.multiply(first[index][part], weight, out=out)
                    for weight_, arrays in others:  # in worker order, as one worker adding them up would
                        numpy.add(out, numpy.multiply(arrays[index][part], weight_, out=scratch), out=out)
                barrier.wait()  # the other workers' gradients are recycled when their sessions end
        except BaseException:
            barrier.abort()
            raise
        return float(cost)

    def _merge(self) -> None:
        """Model averaging: workers' parameters and optimiser memory into the trainer, and back."""
        trainer, merger, locals_ = self.trainer, AverageMerger(), [worker.trainer for worker in self.workers]
        merger.merge(trainer.network, [local.network for local in locals_])
        states = [local.optimiser.state_dict() for local in locals_]
        memory = {pid: merger.merge_arrays([state["memory"][pid] for state in states]) for pid in states[0]["memory"]}
        hyperparameters = trainer.optimiser.hyperparameters()
        trainer.optimiser.load_state_dict({**states[0], "hyperparameters": hyperparameters, "memory": memory},
                                          trainer.handler)
        self._unmerged = 0
        self._pull()

    def _pull(self) -> None:
        """Every worker takes the global parameters and optimiser state (and its freeze filters)."""
        parameters, optimiser = self.trainer.network.state_dict(), self.trainer.optimiser.state_dict()
        for worker in self.workers:
            local = worker.trainer
            local.network.load_state_dict(parameters)
            local.optimiser.load_state_dict(optimiser, local.handler)
            local.refresh_trainable()

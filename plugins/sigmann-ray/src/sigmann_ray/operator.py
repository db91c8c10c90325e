"""The ``ray`` operator: data-parallel workers as Ray actors, gradients combined by a reduce tree.

The driver keeps the global state, exactly as the core's ``threads`` operator
with ``combine = "gradients"`` (see :mod:`sigma_core.workers`): the trainer's
network and optimiser, which hooks read, monitors see and checkpoints save.
Each worker is an actor in its own process that builds the run from the run
file itself (``build_run``: its own handler, of the trainer's kind and dtype,
and its own copy of the data), so records never travel through the driver:
every step the driver sends only the global step's position and a reference
to the current parameters (one ``ray.put``, read by every worker from the
object store), and each worker reads its rows of that global minibatch from
its own data.

Combining is an all-reduce done as reduce-then-broadcast: all workers compute
at once, each weighting its gradients by its share of the records; then the
results climb a binary tree rooted at the driver (its children are workers 0
and 1, worker ``i``'s are ``2i+2`` and ``2i+3``; Ray hands each result from
object store to object store), so the driver receives two gradients whatever
the worker count. It applies the optimiser once, and the next step's
``ray.put`` of the parameters is the broadcast. Why this and not Ray's
collective API: see the README (a measurement). The result equals one worker
on the whole batch up to rounding, and checkpoints resume exactly.

Fault tolerance: the global state changes only after a complete reduce, so
when a worker dies mid-step the driver restarts it (a new actor, which reads
its data again), logs a line naming it, and repeats that step from the last
synchronised state; a worker's random stream restarts every step from
(seed, worker, step), so the repeat is exact. ``restarts`` bounds the
restarts per step. An exception in a worker reaches the driver as one
:class:`~sigma_core.workers.WorkerError` naming the worker and its error.

``address`` names an existing Ray cluster (``ray.init(address=...)``);
without it a local Ray instance is started (unless Ray is already initialised
in this process). Run-file paths are resolved on each worker from the driver's
working directory, so on a cluster the data must be at the same path on every node.
"""

from __future__ import annotations

import logging
import os
import time

import numpy
import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from sigma_core.errors import SigmaError, describe
from sigma_core.operators import SingleWorkerOperator
from sigma_core.workers import Worker, WorkerError, base_seed, shard_bounds, worker_failed

log = logging.getLogger("sigma")


@ray.remote
class RayWorker:
    """One worker process: its own run (handler, network, data) built from the run file."""

    def __init__(self, config: dict, handler_name: str, index: int, count: int, seed: int, directory: str):
        self.failure = None  # reported by pid(): a failed start as one line naming the worker, not an actor traceback
        try:
            if os.path.isdir(directory):
                os.chdir(directory)
            from sigma_core.run import build_run

            run = build_run(config, handler_name=handler_name)
            run.trainer.initialise(run.handler)
        except Exception as error:
            self.failure = worker_failed(index, error)
            return
        self.worker, self.count = Worker(run.trainer, index, seed), count
        iterator = run.trainer.training_iterator
        self.iterator = getattr(iterator, "iterator", iterator)  # the batches under a PrefetchIterator
        self.batches = (None, None)  # (epoch, batch indices of that epoch)

    def pid(self) -> int:
        if self.failure is not None:
            raise self.failure
        return os.getpid()

    def compute(self, parameters: dict, counters: tuple, keep: bool) -> tuple:
        """This worker's part of a global step: its rows' cost and gradients, weighted by their share of the
        global batch. Returns ``(cost, records, {id: gradient}, seconds computing)``; with ``keep``, the
        gradients stay here for :meth:`reduce` and are left out."""
        step, epoch, position = counters
        self.grads = None
        if self.failure is not None:
            raise self.failure
        try:
            if self.batches[0] != epoch:
                self.batches = (epoch, self.iterator.batch_indices(epoch))
            index = self.batches[1][position]
            if isinstance(index, slice):
                index = numpy.arange(*index.indices(len(self.iterator.dataset)))
            bounds = shard_bounds(len(index), self.count)
            rows = index[bounds[self.worker.index]:bounds[self.worker.index + 1]]
            cost, grads, began, share = 0.0, None, time.perf_counter(), len(rows) / len(index)
            if len(rows):
                cost, grads = self.worker.gradients(self.iterator.dataset[rows], parameters, counters, share)
            if keep:
                self.grads, grads = grads, None
            return cost * share, len(rows), grads, time.perf_counter() - began
        except Exception as error:
            raise worker_failed(self.worker.index, error) from None

    def reduce(self, computed: tuple, *children) -> tuple:
        """``(cost, records, {id: gradient}, seconds)``: :meth:`compute`'s result (``computed``) plus the
        children's reductions, as sums (the slowest worker's seconds)."""
        (cost, records, _, seconds), grads, self.grads = computed, self.grads, None
        return _add((cost, records, grads, seconds), *children)


def _add(first, *others) -> tuple:
    """Sum reductions (``first``'s arrays are written into; the driver passes None and its two children's)."""
    cost, records, grads, seconds = first or (0.0, 0, None, 0.0)
    for other_cost, other_records, other_grads, other_seconds in others:
        cost, records, seconds = cost + other_cost, records + other_records, max(seconds, other_seconds)
        if grads is None:
            grads = {pid: grad.copy() for pid, grad in other_grads.items()} if other_grads else None
        elif other_grads:
            for pid, grad in grads.items():
                grad += other_grads[pid]
    return cost, records, grads, seconds


def _reported(error: RayTaskError) -> SigmaError:
    """A worker's exception as the driver raises it: the worker's own one line, not Ray's traceback."""
    return error.cause if isinstance(error.cause, SigmaError) else WorkerError(describe(error.cause or error))


class RayOperator(SingleWorkerOperator):
    """``workers`` Ray actors train the trainer's network; see the module docstring."""

    argument_rules = {"workers": "int >= 1", "cpus_per_worker": "number > 0", "gpus_per_worker": "number >= 0",
                      "restarts": "int >= 0", "blas_threads": "int >= 1"}

    def __init__(self, trainer, *, epochs: int, hooks=(), monitors=(), workers: int = 2, address: str | None = None,
                 cpus_per_worker: float = 1.0, gpus_per_worker: float = 0.0, restarts: int = 3,
                 blas_threads: int = 1):
        if trainer.handler is None:
            raise SigmaError(f"trainer {trainer.name!r}: initialise it before building its operator")
        if trainer.run_config is None:
            raise SigmaError(f"operator 'ray': trainer {trainer.name!r} was not built from a run file, and each "
                             "Ray worker builds its run (and reads its data) from one; use build_run or sigma train")
        super().__init__(trainer, epochs=epochs, hooks=hooks, monitors=monitors)
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
        where = f"the Ray cluster at {address}" if address else "this Ray instance"
        resources = ray.cluster_resources()
        for kind, each in (("CPU", cpus_per_worker), ("GPU", gpus_per_worker)):
            if each and workers * each > resources.get(kind, 0):
                raise SigmaError(f"operator 'ray': {workers} workers need {workers * each:g} {kind}s, "
                                 f"{where} has {resources.get(kind, 0):g}")
        seed = base_seed(trainer.handler)
        threads = str(blas_threads)
        options = dict(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, runtime_env={"env_vars": {
            "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "NUMBA_NUM_THREADS": threads}})
        self.restarts, self.workers = restarts, []
        self.busy_seconds = 0.0  # the workers' computing time, summed over steps (the longest worker's each step)
        self._spawn = lambda index: RayWorker.options(**options).remote(
            trainer.run_config, trainer.handler.name, index, workers, seed, os.getcwd())
        self._count = workers

    def _loop(self) -> None:
        """Workers live for one run (started at its first step), so no run leaves actors holding CPUs."""
        try:
            super()._loop()
        finally:
            for actor in self.workers:
                ray.kill(actor)
            self.workers = []

    def _start_workers(self) -> None:
        self.workers = [self._spawn(index) for index in range(self._count)]
        try:
            ray.get([actor.pid.remote() for actor in self.workers])
        except RayTaskError as error:
            raise _reported(error) from None

    def _reduce(self, parameters, counters: tuple) -> list:
        """Start a global step: every worker computes at once, then the results climb a binary tree rooted
        at the driver (its children are workers 0 and 1, worker ``i``'s are ``2i+2`` and ``2i+3``; Ray hands
        each result on directly). Returns the refs of the driver's children."""
        count = len(self.workers)
        computed = [actor.compute.remote(parameters, counters, 2 * index + 2 < count)
                    for index, actor in enumerate(self.workers)]
        results = computed[:]  # a worker without children: its computation is its result
        for index in reversed(range(count)):
            children = [results[child] for child in (2 * index + 2, 2 * index + 3) if child < count]
            if children:
                results[index] = self.workers[index].reduce.remote(computed[index], *children)
        return results[:2]

    def _step(self, batch: dict):
        trainer = self.trainer
        if not self.workers:
            self._start_workers()
        counters = (trainer.total_iterations, trainer.epoch, trainer.iteration)
        parameters = ray.put(trainer.network.state_dict())
        for attempt in range(self.restarts + 1):
            try:
                cost, records, grads, seconds = _add(None, *ray.get(self._reduce(parameters, counters)))
                break
            except RayActorError as error:  # a worker died: its replacement repeats the step from the same state
                if attempt == self.restarts:
                    raise WorkerError(f"Ray workers died {attempt + 1} times in global step "
                                      f"{trainer.total_iterations + 1}; giving up: {describe(error)}") from None
                self._restart_dead(trainer.total_iterations + 1, error)
            except RayTaskError as error:
                raise _reported(error) from None
        self.busy_seconds += seconds
        if records != len(batch["inputs"]):
            raise SigmaError(f"operator 'ray': the workers read {records} records of a {len(batch['inputs'])}-record "
                             "batch; their data differs from the driver's")
        return trainer.apply_gradients(grads, cost)

    def _restart_dead(self, step: int, error: BaseException) -> None:
        """Replace every worker that no longer answers; the step is then repeated from the global state."""
        for index, actor in enumerate(self.workers):
            try:
                ray.get(actor.pid.remote(), timeout=60)
            except (RayActorError, GetTimeoutError):
                log.warning("ray worker %d died in global step %d (%s); restarted it, repeating the step from the "
                            "last synchronised state", index, step, type(error).__name__)
                ray.kill(actor)
                self.workers[index] = self._spawn(index)

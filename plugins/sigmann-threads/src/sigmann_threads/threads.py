"""The ``threads`` operator (Sigma's multithreaded CPU operator): data-parallel workers on threads of this process.

It is an operator of the loop (:class:`sigma_core.Operator`): the loop owns the
epochs, commands and events, and asks :class:`ThreadsOperator` for each
iteration. The global state is the trainer (network, optimiser, counters,
iterators, on its handler): what hooks read and checkpoints save. Each worker
(:class:`~sigmann_threads.workers.Worker`) has a local copy
(:meth:`Trainer.replica`) on its own handler of the trainer's class and dtype,
and trains on its share of every global minibatch. Worker 0 runs on the
training thread, the others on a pool; the loop's ``iteration`` event comes
once every worker has finished.

``combine = "gradients"`` (default, synchronous data parallelism): each worker
takes the gradients of its shard at the global parameters (host handlers
read them in place) weighted by its share of the records; the workers then
add them up, each a slice of every parameter, and the trainer's optimiser
applies the sum once. That equals one worker on the whole batch up to
rounding; the global state is complete after every step, so checkpoints
resume exactly.

Layer state (batch norm's running statistics: ``Network.state``) is merged
like the parameters, at every merge: each worker updates its own copy on
its shard (as PyTorch's DDP without SyncBatchNorm normalises each replica
with its own batch's statistics), and the trainer's becomes their mean,
weighted by each worker's share of the records in gradient averaging
(every step; the workers then take it back), plain as the parameters' in
model averaging. An exponential running average is linear in the batches'
statistics, so the running mean is one worker's on the whole batch, up to
rounding; the running variance is the shards' variance, without the
spread between shard means (SyncBatchNorm's would need the workers to meet
inside the forward pass).

``combine = "models"`` (Sigma's model averaging): each worker steps its own
optimiser; every ``every`` iterations, and when the loop asks for a merge (at
each epoch's end, and when a stop or reset abandons one), worker parameters
and optimiser memory are averaged into the trainer
(:class:`~sigmann_threads.mergers.AverageMerger`) and the workers take that
back, with the trainer's hyperparameters (``set`` commands and hooks change
those). Hooks and a paused run see the last merge; a resume is exact from a
checkpoint taken at a merge (every epoch's is).

During a run BLAS gets ``blas_threads`` threads, and so do the ``cpu``
handler's kernels: the workers are the parallelism, and more threads would
fight them for the cores (the global update between steps too: on a loaded
machine a parallel one waits for a descheduled thread).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy

from sigma_core import SigmaError, Operator, require

from .mergers import AverageMerger, WeightedMerger
from .workers import Worker, base_seed, blas_threads, shard_bounds, worker_failed

log = logging.getLogger("sigma")
COMBINE = ("gradients", "models")


class ThreadsOperator(Operator):
    """``workers`` data-parallel workers on threads of this process; see the module docstring."""

    argument_rules = {"workers": "int >= 1", "every": "int >= 1", "blas_threads": "int >= 0"}

    def __init__(self, trainer, *, workers: int = 2, combine: str = "gradients", every: int = 1,
                 blas_threads: int = 1):
        require("operator.combine", COMBINE, combine)
        if trainer.handler is None:
            raise SigmaError(f"trainer {trainer.name!r}: initialise it before building its operator")
        if workers > (os.cpu_count() or 1):
            log.warning("operator threads: %d workers on %d CPUs; they will share cores", workers, os.cpu_count())
        super().__init__(trainer)
        self.combine, self.every, self.blas_threads = combine, every, blas_threads
        handler, base = trainer.handler, base_seed(trainer.handler)  # worker handlers are reseeded every step
        self.workers = [Worker(trainer.replica(type(handler)(dtype=handler.dtype), f"{trainer.name}/worker{index}"),
                               index, base) for index in range(workers)]
        self._pool = None  # during a run: the threads of workers 1, 2, ...
        self._limits = contextlib.ExitStack()  # during a run: BLAS kept to blas_threads
        # Gradient averaging: each worker's (share, flat gradients), their weighted sums, a scratch array each.
        largest = max(trainer.network.parameters.values(), key=lambda array: array.size)
        self._host = handler.host_view(largest) is not None  # the workers' handlers are of the same class
        self._parts, self._sums = [None] * workers, {}
        self._scratch = [numpy.empty(largest.size, handler.dtype) for _ in range(workers)]
        self._unmerged = 0  # model averaging: local iterations since the last merge

    # -- the operator ---------------------------------------------------------------------------------
    def setup(self, loop) -> None:
        """The workers take the global state; BLAS keeps to ``blas_threads``; the pool starts."""
        self._pull()
        self._limits.enter_context(blas_threads(self.blas_threads))
        self._pool = ThreadPoolExecutor(max(1, len(self.workers) - 1),
                                        thread_name_prefix=f"sigma-worker-{self.trainer.name}")

    def step(self, batch: dict):
        """One global iteration: every worker on its shard (worker 0 on this thread), then the combination."""
        trainer, models = self.trainer, self.combine == "models"
        records = len(batch["inputs"])
        bounds = shard_bounds(records, len(self.workers))
        counters = (trainer.total_iterations, trainer.epoch, trainer.iteration)
        work = [(worker, {key: values[start:stop] for key, values in batch.items()}, (stop - start) / records)
                for worker, start, stop in zip(self.workers, bounds, bounds[1:]) if stop > start]
        barrier = threading.Barrier(len(work))
        calls = [functools.partial(worker.train, shard, counters) if models else
                 functools.partial(self._gradients, shard, counters, share, worker, position, len(work), barrier)
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
            self._merge_state(work)
            return trainer.apply_gradients(self._sums, cost)
        self._unmerged += 1
        if self._unmerged >= self.every:
            self.merge()
        return cost

    def merge(self) -> None:
        """Model averaging: workers' parameters, layer state and optimiser memory into the trainer, and back (if
        they did any work since the last merge)."""
        if not self._unmerged:
            return
        trainer, merger, locals_ = self.trainer, AverageMerger(), [worker.trainer for worker in self.workers]
        merger.merge(trainer.network, [local.network for local in locals_])
        states = [local.optimiser.state_dict() for local in locals_]
        memory = {pid: merger.merge_arrays([state["memory"][pid] for state in states]) for pid in states[0]["memory"]}
        hyperparameters = trainer.optimiser.hyperparameters()
        trainer.optimiser.load_state_dict({**states[0], "hyperparameters": hyperparameters, "memory": memory},
                                          trainer.handler)
        self._unmerged = 0
        self._pull()

    def reset(self) -> None:
        """The trainer is back at its initial state: the workers take it."""
        self._pull()

    def teardown(self) -> None:
        """The pool stops and BLAS gets its threads back."""
        try:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
        finally:
            self._limits.close()

    # -- the workers ------------------------------------------------------------------------------------
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
                    if local.network.state:  # copied, not shared: the worker's forward pass moves it
                        local.network.load_state_dict(state_of(self.trainer.network), partial=True)
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

    def _merge_state(self, work: list) -> None:
        """Gradient averaging: the trainer's layer state becomes the workers', weighted by their shares of the
        records (in worker order)."""
        if self.trainer.network.state:
            merger = WeightedMerger([share for *_, share in work])
            states = [state_of(worker.trainer.network) for worker, *_ in work]
            self.trainer.network.load_state_dict(merger.merge_arrays(states), partial=True)

    def _pull(self) -> None:
        """Every worker takes the global parameters and optimiser state (and its freeze filters)."""
        parameters, optimiser = self.trainer.network.state_dict(), self.trainer.optimiser.state_dict()
        for worker in self.workers:
            local = worker.trainer
            local.network.load_state_dict(parameters)
            local.optimiser.load_state_dict(optimiser, local.handler)
            local.refresh_trainable()


def state_of(network) -> dict:
    """A network's layer state (``Network.state``: not trained, moved by the forward pass) as NumPy copies."""
    return {key: array.to_numpy() for key, array in network.state.items()}

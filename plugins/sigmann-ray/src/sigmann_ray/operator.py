"""The ``ray`` operator: data-parallel workers as Ray actors, in lockstep, gradients all-gathered.

It is a strategy of the loop (:class:`sigma_core.Strategy`), built from the
workers of sigmann-threads (:class:`sigmann_threads.Worker` and its seeds,
shards and errors). The driver keeps the global state, exactly as the
``threads`` operator with ``combine = "gradients"`` does: the trainer's
network and optimiser, which hooks read and checkpoints save.
Each worker is an actor in its own process that builds the run from the run
file itself (``build_run``: its own handler, of the trainer's kind and dtype,
its own optimiser and its own copy of the data), so records never travel
through the driver, and it keeps a replica of the global state.

The actors work in lockstep through a Ray Compiled Graph (``ray.dag``),
compiled once per synchronisation: each global step is one execution of
``compute`` on every worker (apply the last step's summed gradients with the
hyperparameters the driver sends, then compute this worker's rows of the
global minibatch and return their weighted gradients as one flat array)
followed by ``gather`` on every worker (add every worker's array, in worker
order so every process gets the same bits). The arrays travel through the
graph's shared-memory channels (Ray's object transfer between nodes) into
buffers allocated once: an all-gather with no object-store object created per
step and none of Ray's task launch cost (measurements in the README). The
driver reads the same arrays, adds them up and applies the sum to the global
state, so it and every replica stay identical. The next execution is
submitted before the driver applies this one, carrying the hyperparameters it
applies with; if the next step turns out to be another, that execution is
dropped. The result equals one worker on the whole batch up to rounding, and
checkpoints resume exactly.

The workers take the driver's whole state (parameters, optimiser state,
freeze filters) when a run starts, after a reset, when the trainable
parameters change, and after a restart. A hook that writes parameters in
place between steps is not seen by the workers (no Sigma hook does).

Fault tolerance: the global state changes only after every worker returned, so
when a worker dies mid-step the driver tears the graph down, restarts the
worker (a new actor, which reads its data again), logs a line naming it, gives
every worker the global state, compiles the graph anew and repeats that step
from it; a worker's random stream restarts every step from
(seed, worker, step), so the repeat is exact. ``restarts`` bounds the
restarts per step. An exception in a worker reaches the driver as one
:class:`~sigmann_threads.WorkerError` naming the worker and its error.

``address`` names an existing Ray cluster (``ray.init(address=...)``);
without it a local Ray instance is started (unless Ray is already initialised
in this process), whose workers run at the driver's priority
(:data:`LOCAL_RAY`). Run-file paths are resolved on each worker from the
driver's working directory, so on a cluster the data must be at the same
path on every node.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import math
import os
import statistics
import time

import numpy
import ray
from ray.dag import InputNode, MultiOutputNode
from ray.exceptions import GetTimeoutError, RayActorError, RayChannelError, RayTaskError

from sigma_core import SigmaError, Strategy, build_run, describe
from sigmann_threads import Worker, WorkerError, base_seed, blas_threads, shard_bounds, worker_failed

log = logging.getLogger("sigma")
#: A local Ray instance runs its workers at the driver's priority: Ray's default (nice +15) leaves training
#: actors behind every other process on a busy machine, and behind their own driver.
LOCAL_RAY = {"worker_niceness": 0}


@ray.remote
class RayWorker:
    """One worker process: its own run (handler, network, optimiser, data) built from the run file."""

    def __init__(self, config: dict, handler_name: str, index: int, count: int, seed: int, directory: str):
        self.failure = None  # reported by load(): a failed start as one line naming the worker, not an actor traceback
        try:
            if os.path.isdir(directory):
                os.chdir(directory)
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
        return os.getpid()

    def load(self, state: tuple) -> str:
        """Take the driver's state: (layout of the flat gradient, parameters, optimiser state). Returns the
        id of this worker's node."""
        if self.failure is not None:
            raise self.failure
        self.layout, parameters, optimiser = state
        local = self.worker.trainer
        local.network.load_state_dict(parameters)
        local.optimiser.load_state_dict(optimiser, local.handler)
        local.refresh_trainable()
        size = sum(stop - start for _, start, stop, _ in self.layout)
        self.flat, self.total = numpy.zeros(size, local.handler.dtype), numpy.empty(size, local.handler.dtype)
        self.summed = False
        return ray.get_runtime_context().get_node_id()

    def compute(self, order: tuple) -> tuple:
        """Apply the last step's summed gradients (if ``gather`` left some) with ``order``'s hyperparameters,
        then this worker's part of global step ``order``'s counters: its rows' cost and gradients, weighted by
        their share of the global batch. Returns ``(cost, records, flat gradients, seconds computing)``."""
        if self.failure is not None:
            raise self.failure
        counters, hyperparameters = order
        try:
            local = self.worker.trainer
            if self.summed:
                for name, value in hyperparameters.items():
                    setattr(local.optimiser, name, value)
                local.apply_gradients(unflatten(self.total, self.layout), 0.0)
                self.summed = False
            step, epoch, position = counters
            if self.batches[0] != epoch:
                self.batches = (epoch, self.iterator.batch_indices(epoch))
            index = self.batches[1][position]
            if isinstance(index, slice):
                index = numpy.arange(*index.indices(len(self.iterator.dataset)))
            bounds = shard_bounds(len(index), self.count)
            rows = index[bounds[self.worker.index]:bounds[self.worker.index + 1]]
            cost, began, share = 0.0, time.perf_counter(), len(rows) / len(index)
            if not len(rows):  # fewer records than workers: this one adds nothing
                self.flat.fill(0.0)
            else:
                self.worker.prepare(*counters)
                with local.handler.session():
                    cost, grads = local.gradients(self.iterator.dataset[rows])
                    for pid, start, stop, shape in self.layout:
                        grad = local.handler.host_view(grads[pid])
                        grad = grads[pid].to_numpy() if grad is None else grad
                        numpy.multiply(grad.reshape(-1), share, out=self.flat[start:stop])
            return float(cost) * share, len(rows), self.flat, time.perf_counter() - began
        except Exception as error:
            raise worker_failed(self.worker.index, error) from None

    def gather(self, *results) -> float:
        """Every worker's result of this step: their gradients summed, to be applied by the next ``compute``.
        Returns the time.perf_counter() at the end: when this step's last output was ready."""
        add_up([result[2] for result in results], self.total)
        self.summed = True
        return time.perf_counter()


def add_up(flats: list, out: numpy.ndarray) -> numpy.ndarray:
    """The sum of the workers' weighted gradients, in worker order (so every process gets the same bits)."""
    numpy.copyto(out, flats[0])
    for flat in flats[1:]:
        out += flat
    return out


def unflatten(flat: numpy.ndarray, layout: list) -> dict:
    """Gradients by id, as views of ``flat``."""
    return {pid: flat[start:stop].reshape(shape) for pid, start, stop, shape in layout}


def _reported(error: RayTaskError) -> SigmaError:
    """A worker's exception as the driver raises it: the worker's own one line, not Ray's traceback."""
    return error.cause if isinstance(error.cause, SigmaError) else WorkerError(describe(error.cause or error))


class RayWorkers(Strategy):
    """``workers`` Ray actors train the trainer's network; see the module docstring."""

    argument_rules = {"workers": "int >= 1", "cpus_per_worker": "number > 0", "gpus_per_worker": "number >= 0",
                      "restarts": "int >= 0", "blas_threads": "int >= 1"}

    def __init__(self, trainer, *, workers: int = 2, address: str | None = None, cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0, restarts: int = 3, blas_threads: int = 1):
        if trainer.handler is None:
            raise SigmaError(f"trainer {trainer.name!r}: initialise it before building its operator")
        if trainer.run_config is None:
            raise SigmaError(f"operator 'ray': trainer {trainer.name!r} was not built from a run file, and each "
                             "Ray worker builds its run (and reads its data) from one; use build_run or sigma train")
        super().__init__(trainer)
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING,
                     _system_config=None if address else LOCAL_RAY)
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
        self.restarts, self.workers, self.blas_threads = restarts, [], blas_threads
        self.busy_seconds = 0.0  # the workers' computing time, summed over steps (the longest worker's each step)
        self._spawn = lambda index: RayWorker.options(**options).remote(
            trainer.run_config, trainer.handler.name, index, workers, seed, os.getcwd())
        self._count, self._synced, self._ahead = workers, None, None  # _ahead: (counters, refs) of the next step
        self._graph = None  # the compiled graph of one global step, for the synchronised layout
        self._local, self._ready, self._paces, self._busy = False, 0.0, collections.deque(maxlen=5), 0.0
        self._limits = contextlib.ExitStack()  # during a run: this process's BLAS kept to blas_threads

    # -- the strategy ---------------------------------------------------------------------------------
    def setup(self, loop) -> None:
        """Workers live for one run (started at its first step), so no run leaves actors holding CPUs. This
        process keeps to ``blas_threads`` too meanwhile: its update overlaps the workers' steps."""
        self._limits.enter_context(blas_threads(self.blas_threads))

    def step(self, batch: dict):
        """One global step: every worker's rows in one execution of the graph, their sum applied here."""
        trainer = self.trainer
        if not self.workers:  # started here, they take the global state in the first _sync
            self.workers = [self._spawn(index) for index in range(self._count)]
        layout, counters = self._layout(), (trainer.total_iterations, trainer.epoch, trainer.iteration)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and (ahead[0] != counters or layout != self._synced):
            ahead, self._synced = None, None  # not the step started ahead (a reset, new trainable parameters)
        # The next step starts at once: the workers go on to it as soon as they all have this one's results,
        # while this process applies them and runs the hooks. They apply them with the hyperparameters this
        # process does, the current ones; if the next step turns out to be another, its result is dropped above.
        step, epoch, iteration = counters
        following = (step + 1, epoch, iteration + 1) if iteration + 1 < len(trainer.training_iterator) else (
            step + 1, epoch + 1, 0)
        hyperparameters = trainer.optimiser.hyperparameters()
        for attempt in range(self.restarts + 1):
            try:
                if layout != self._synced:
                    self._sync(layout)
                refs = ahead[1] if ahead else self._graph.execute((counters, {}))
                self._ahead = (following, self._graph.execute((following, hyperparameters)))
                results = self._results(refs)
                break
            except (RayActorError, RayChannelError) as error:  # a worker died: repeat the step from the global state
                if attempt == self.restarts:
                    raise WorkerError(f"Ray workers died {attempt + 1} times in global step "
                                      f"{trainer.total_iterations + 1}; giving up: {describe(error)}") from None
                self._drop_graph()
                self._restart_dead(trainer.total_iterations + 1, error)
                ahead = None
            except RayTaskError as error:
                raise _reported(error) from None
        cost, records = sum(result[0] for result in results), sum(result[1] for result in results)
        self.busy_seconds += self._busy
        if records != len(batch["inputs"]):
            raise SigmaError(f"operator 'ray': the workers read {records} records of a {len(batch['inputs'])}-record "
                             "batch; their data differs from the driver's")
        total = add_up([result[2] for result in results], self._total)
        del results, refs  # the channels' buffers are read in place: release them before the next step's read
        return trainer.apply_gradients(unflatten(total, layout), cost)

    def reset(self) -> None:
        """The trainer was reset: the workers take its state before the next step."""
        self._synced = None

    def teardown(self) -> None:
        """The graph is torn down and the actors killed; BLAS gets its threads back."""
        try:
            self._drop_graph()
            for actor in self.workers:
                ray.kill(actor)
            self.workers = []
            # A read that failed (a worker died) leaves its exception in a reference cycle whose frames hold
            # results read in place from the graph's shared memory; freed after ray.shutdown(), they crash the
            # process (SIGSEGV in Ray's MutableObjectManager::ReadRelease). Free them while it is mapped.
            gc.collect()
        finally:
            self._limits.close()

    # -- the workers and their graph --------------------------------------------------------------------
    def _layout(self) -> list:
        """Where each trainable parameter's gradient sits in the flat gradient: ``(id, start, stop, shape)``."""
        parameters, layout, start = self.trainer.network.parameters, [], 0
        for pid in self.trainer.optimiser.trainable(list(parameters)):
            shape = tuple(parameters[pid].shape)
            layout.append((pid, start, start + math.prod(shape), shape))
            start += math.prod(shape)
        return layout

    def _sync(self, layout: list) -> None:
        """Every worker takes the global state (dropping any step started ahead), and the graph is compiled."""
        trainer = self.trainer
        log.debug("ray: the workers take the global state at step %d", trainer.total_iterations + 1)
        self._drop_graph()
        state = ray.put((layout, trainer.network.state_dict(), trainer.optimiser.state_dict()))
        nodes = ray.get([actor.load.remote(state) for actor in self.workers])
        self._local = set(nodes) == {ray.get_runtime_context().get_node_id()}
        size = layout[-1][2] if layout else 0
        self._total = numpy.empty(size, trainer.handler.dtype)
        with InputNode() as order:
            results = [actor.compute.bind(order) for actor in self.workers]
            step = MultiOutputNode(results + [actor.gather.bind(*results) for actor in self.workers])
        # A channel holds one result: the flat gradients and a little pickle framing.
        self._graph = step.experimental_compile(_buffer_size_bytes=size * self._total.itemsize + (1 << 16))
        self._synced = layout

    def _drop_graph(self) -> None:
        """Drop the compiled graph and any execution in flight (the workers keep their state)."""
        if self._graph is not None:
            self._graph.teardown()
        self._graph, self._synced, self._ahead, self._ready = None, None, None, 0.0
        self._paces.clear()

    def _results(self, refs: list) -> list:
        """The workers' results of one execution. Reading a compiled graph's output busy-waits, which takes a
        core from the workers when they share this machine: so, when they do (and so share its clock), this
        process first sleeps until their results should be ready (when the last step's were, plus the recent
        pace: a median, so one pause is an outlier), and only then reads. No time limit: a dead worker ends
        the read with an error."""
        if self._local and self._paces:
            time.sleep(max(0.0, self._ready + statistics.median(self._paces) - time.perf_counter()))
        outputs = [ref.get(timeout=-1) for ref in refs]  # every output read, gather's too
        results, ready = outputs[:self._count], max(outputs[self._count:])
        if self._local and self._ready:
            self._paces.append(ready - self._ready)
        self._ready, self._busy = ready, max(result[3] for result in results)
        return results

    def _restart_dead(self, step: int, error: BaseException) -> None:
        """Replace every worker that no longer answers."""
        for index, actor in enumerate(self.workers):
            try:
                ray.get(actor.pid.remote(), timeout=60)
            except (RayActorError, GetTimeoutError):
                log.warning("ray worker %d died in global step %d (%s); restarted it, repeating the step from the "
                            "last synchronised state", index, step, type(error).__name__)
                ray.kill(actor)
                self.workers[index] = self._spawn(index)

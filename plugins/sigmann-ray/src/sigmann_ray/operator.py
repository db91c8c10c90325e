"""The ``ray`` operator: data-parallel workers as Ray actors, in lockstep, gradients all-gathered.

It is a strategy of the loop (:class:`sigma_core.Strategy`), built from the
workers of sigmann-threads (:class:`sigmann_threads.Worker` and its seeds,
shards and errors). The driver keeps the global state, exactly as the
``threads`` operator with ``combine = "gradients"`` does: the trainer's
network and optimiser, which hooks read and checkpoints save. Each worker
(:mod:`sigmann_ray.worker`) is an actor that builds the run from the run
file itself and keeps a replica of the global state.

Each global step, every worker applies the last step's summed gradients,
computes its rows of the global minibatch and hands out their weighted
gradients as one flat array; every worker and the driver add all of them up
in worker order, so they all get the same bits. The arrays travel through a
compiled graph when every worker shares the driver's node, and through Ray's
object transfer otherwise (:mod:`sigmann_ray.exchange`). The next step is
submitted before the driver applies this one, carrying the hyperparameters
it applies with; if the next step turns out to be another (a reset, new
trainable parameters), it is dropped. The result equals one worker on the
whole batch up to rounding, and checkpoints resume exactly.

Layer state (batch norm's running statistics) follows the ``threads``
operator's rule: every step, every process takes the workers' state
weighted by their shares of the records (it travels in the flat array,
after the gradients), so the driver's is what hooks, evaluation and
checkpoints see.

The workers take the driver's whole state (parameters, optimiser state,
freeze filters) when a run starts, after a reset, when the trainable
parameters change, and after a restart. A hook that writes parameters in
place between steps is not seen by the workers (no Sigma hook does).

Fault tolerance: the global state changes only after every worker returned,
and every wait has a limit (``timeout``). When a worker dies or does not
answer in time, the driver drops the exchange, replaces every worker that no
longer answers (a new actor, which reads its data again), logs a line naming
it and its node, gives every worker the global state and repeats that step
from it; a worker's random stream restarts every step from
(seed, worker, step), so the repeat is exact. ``restarts`` bounds the
restarts per step; past it, the run ends in one line naming the worker and
its node. An exception in a worker reaches the driver as one
:class:`~sigmann_threads.WorkerError` naming the worker and its error.

Joining Ray (a local instance, or a cluster by ``address`` with its token)
is :mod:`sigmann_ray.cluster`'s, which also keeps Ray's own messages in a
log file. Run-file paths are resolved on each worker from the driver's
working directory, so on a cluster the data must be at the same path on
every node.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import time

import numpy

from sigma_core import SigmaError, Strategy
from sigmann_ray import cluster
from sigmann_ray import flat
from sigmann_threads import WorkerError, base_seed, blas_threads

log = logging.getLogger("sigma")
LOCAL_RAY = cluster.LOCAL_RAY  # kept here too: tests and benchmarks start a local instance as the operator does


class RayWorkers(Strategy):
    """``workers`` Ray actors train the trainer's network; see the module docstring."""

    argument_rules = {"workers": "int >= 1", "cpus_per_worker": "number > 0", "gpus_per_worker": "number >= 0",
                      "restarts": "int >= 0", "blas_threads": "int >= 1", "timeout": "number > 0",
                      "start_timeout": "number > 0", "connect_timeout": "number > 0"}

    def __init__(self, trainer, *, workers: int = 2, address: str | None = None, token_file: str | None = None,
                 connect_timeout: float = 30.0, start_timeout: float = 300.0, timeout: float = 300.0,
                 cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0, restarts: int = 3, blas_threads: int = 1):
        if trainer.handler is None:
            raise SigmaError(f"trainer {trainer.name!r}: initialise it before building its operator")
        if trainer.run_config is None:
            raise SigmaError(f"operator 'ray': trainer {trainer.name!r} was not built from a run file, and each "
                             "Ray worker builds its run (and reads its data) from one; use build_run or sigma train")
        super().__init__(trainer)
        where = cluster.join(address, token_file=token_file, connect_timeout=connect_timeout)
        import ray  # after joining: Ray reads its authentication mode when imported

        from sigmann_ray.worker import RayWorker

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
        #: Seconds to wait for a worker to start and take the state, and for anything else a worker does.
        self.start_timeout, self.timeout = start_timeout, timeout
        #: Per worker, the node it ran on at the last synchronisation: (IP address, node id).
        self.nodes: list[tuple[str, str]] = []
        #: Seconds summed over steps: the workers' computing (the slowest worker's each step), their merging
        #: (adding up the workers' gradients and applying them: the slowest worker's), both on a step's critical
        #: path (the rest of it is transfer and waiting), and the driver's merging, which overlaps the workers'
        #: next step.
        self.busy_seconds, self.merge_seconds, self.driver_seconds = 0.0, 0.0, 0.0
        self._spawn = lambda index: RayWorker.options(**options).remote(
            trainer.run_config, trainer.handler.name, index, workers, seed, os.getcwd())
        self._count, self._synced, self._ahead = workers, None, None  # _ahead: (counters, refs) of the next step
        self._exchange = None  # how the synchronised workers' results travel (sigmann_ray.exchange)
        self._placement = None  # the last placement logged
        self._pids: list[int] = []  # the workers' process ids at the last synchronisation
        self._limits = contextlib.ExitStack()  # during a run: this process's BLAS kept to blas_threads

    # -- the strategy ---------------------------------------------------------------------------------
    def setup(self, loop) -> None:
        """Workers live for one run (started at its first step), so no run leaves actors holding CPUs. This
        process keeps to ``blas_threads`` too meanwhile: its update overlaps the workers' steps."""
        self._limits.enter_context(blas_threads(self.blas_threads))

    def step(self, batch: dict):
        """One global step: every worker's rows, their sum applied here."""
        from sigmann_ray.exchange import LostWorker

        trainer = self.trainer
        if not self.workers:  # started here, they take the global state in the first _sync
            self.workers = [self._spawn(index) for index in range(self._count)]
        places, counters = flat.layout(trainer), (trainer.total_iterations, trainer.epoch, trainer.iteration)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and (ahead[0] != counters or places != self._synced):
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
                if places != self._synced:
                    self._sync(places)
                refs = ahead[1] if ahead else self._exchange.submit((counters, {}))
                self._ahead = (following, self._exchange.submit((following, hyperparameters)))
                results, _ = self._exchange.results(refs)
                break
            except LostWorker as error:
                lost = error
            if lost.silent:
                self._silence(lost.index)
            self._drop_exchange()
            refs = ahead = None  # after the graph is torn down (its references then free nothing), and before
            gc.collect()  # the error: nothing read from the workers outlives a failed step
            lost_workers = self._lost(lost)
            if attempt == self.restarts:
                raise WorkerError(self._giving_up(step + 1, lost_workers or [(None, lost.reason)], attempt + 1))
            for index, reason in lost_workers:
                log.warning("ray worker %d on %s %s in global step %d; restarted it, repeating the step from the "
                            "last synchronised state", index, self._node(index), reason, step + 1)
                self._replace(index)
        began = time.perf_counter()
        cost, records = sum(result[0] for result in results), sum(result[1] for result in results)
        self.busy_seconds += max(result[3] for result in results)
        self.merge_seconds += max(result[4] for result in results)
        total = flat.add_up([result[2] for result in results], self._total)
        del results, refs  # a compiled graph's buffers are read in place: release them before the next step's read
        if records != len(batch["inputs"]):
            raise SigmaError(f"operator 'ray': the workers read {records} records of a {len(batch['inputs'])}-record "
                             "batch; their data differs from the driver's")
        gradients, state = flat.unflatten(total, places, trainer.network)
        trainer.network.load_state_dict(state, partial=True)
        applied = trainer.apply_gradients(gradients, cost)
        self.driver_seconds += time.perf_counter() - began
        return applied

    def reset(self) -> None:
        """The trainer was reset: the workers take its state before the next step."""
        self._synced = None

    def teardown(self) -> None:
        """The exchange is dropped and the actors killed; BLAS gets its threads back."""
        import ray

        try:
            self._drop_exchange()
            for actor in self.workers:
                ray.kill(actor)
            self.workers = []
            # Results read in place from a compiled graph's shared memory and caught in a reference cycle crash
            # the process when freed after ray.shutdown() (SIGSEGV in MutableObjectManager::ReadRelease): free
            # them while it is mapped.
            gc.collect()
        finally:
            self._limits.close()

    # -- the workers and their exchange ---------------------------------------------------------------
    def _sync(self, places: list) -> None:
        """Every worker takes the global state (dropping any step started ahead); then the exchange is made: a
        compiled graph when every worker shares this process's node, Ray's object transfer otherwise."""
        import ray

        from sigmann_ray.exchange import CompiledExchange, ObjectExchange, wait

        trainer = self.trainer
        log.debug("ray: the workers take the global state at step %d", trainer.total_iterations + 1)
        self._drop_exchange()
        state = ray.put((places, trainer.network.state_dict(), trainer.optimiser.state_dict()))
        loaded = wait([actor.load.remote(state) for actor in self.workers], self.start_timeout)
        ids, self._pids = [node for node, _ in loaded], [pid for _, pid in loaded]
        addresses = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
        self.nodes = [(addresses.get(node, "unknown"), node) for node in ids]
        size = places[-1][2] if places else 0
        self._total = numpy.empty(size, trainer.handler.dtype)
        if set(ids) == {ray.get_runtime_context().get_node_id()}:
            self._exchange = CompiledExchange(self.workers, size, self._total.itemsize, self.timeout)
        else:
            self._exchange = ObjectExchange(self.workers, self.timeout)
        placement = "ray: {}; results through {}".format(
            ", ".join(f"worker {index} on {self._node(index)}" for index in range(len(self.nodes))),
            "a compiled graph" if isinstance(self._exchange, CompiledExchange) else "Ray's object transfer")
        if placement != self._placement:  # said when the run starts and when a restart moves a worker
            log.info("%s", placement)
            self._placement = placement
        self._synced = places

    def _drop_exchange(self) -> None:
        """Drop the exchange and any step in flight (the workers keep their state)."""
        exchange, self._exchange, self._synced = self._exchange, None, None
        if exchange is not None:
            exchange.close()
        self._ahead = None  # after the teardown: a reference to a live graph's execution would wait for it

    def _node(self, index: int) -> str:
        """Where worker ``index`` ran: ``node 192.0.2.2 (id 3f2a1b9c)``."""
        if index >= len(self.nodes):
            return "node not known yet"
        address, node = self.nodes[index]
        return f"node {address} (id {node[:8]})"

    def _giving_up(self, step: int, lost: list, times: int) -> str:
        who = "; ".join(("a Ray worker" if index is None else f"ray worker {index} on {self._node(index)}") + " "
                        + reason for index, reason in lost)
        budget = "restarts = 0 allows none" if not self.restarts else f"lost workers {times} times in this step"
        return (f"{who} in global step {step}; giving up ({budget}); "
                f"Ray's messages: {cluster.log_path()} and the nodes' Ray session logs")

    def _lost(self, lost) -> list[tuple[int, str]]:
        """``(index, reason)`` of the worker that was lost and of every other that no longer answers within the
        time limit (a compiled graph does not say which worker died: each is asked)."""
        from sigmann_ray.exchange import LostWorker, wait

        found = []
        for index, actor in enumerate(self.workers):
            if index == lost.index:
                found.append((index, lost.reason))
                continue
            try:
                wait([actor.pid.remote()], self.timeout)
            except LostWorker as error:
                found.append((index, error.reason))
        return found

    def _silence(self, index: int) -> None:
        """End a worker that stopped answering before the exchange is dropped: tearing a compiled graph down
        waits for every actor in it. Ray ends the actor; one on this node (the compiled graph's case), which
        may be too stuck to obey Ray, is also killed as a process."""
        import ray

        from sigmann_ray.exchange import CompiledExchange

        ray.kill(self.workers[index])
        if isinstance(self._exchange, CompiledExchange) and index < len(self._pids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._pids[index], signal.SIGKILL)

    def _replace(self, index: int) -> None:
        """A new actor for worker ``index`` (it reads its data again and takes the state at the next sync)."""
        import ray

        ray.kill(self.workers[index])
        self.workers[index] = self._spawn(index)

"""The ``ray`` operator: data-parallel workers, the driver and Ray actors, in lockstep, gradients all-gathered.

It is an operator of the loop (:class:`sigma_core.Operator`), built from the
workers of sigmann-threads (:class:`sigmann_threads.Worker` and its seeds,
shards and errors). The driver keeps the global state, exactly as the
``threads`` operator with ``combine = "gradients"`` does: the trainer's
network and optimiser, which hooks read and checkpoints save. As rank 0 in
PyTorch's DDP or Ray Train, the driver is also worker 0: it computes the
first rows of every global minibatch itself, on the trainer. Workers 1 to
N-1 are Ray actors (:mod:`sigmann_ray.worker`), each of which builds the run
from the run file itself and keeps a replica of the global state. With
``workers = 1`` there are no actors: the driver trains alone.

Each global step, the driver submits the step to the actors (with its own
array of the last step: the sum starts with it), computes its rows
meanwhile, submits the next step as soon as it has its own array, reads the
actors' arrays, adds all of them up in worker order and applies the sum.
Every actor does the same sum and update on its replica before computing its
rows of the next step: no process does the work twice, and every process
gets the same bits. When every actor shares the driver's node, the arrays
stay in shared memory where they are computed, and a compiled graph keeps
everyone in step; otherwise they travel by Ray's object transfer
(:mod:`sigmann_ray.exchange`). If the step submitted ahead turns out to be
another (a reset, new trainable parameters), it is dropped. The result
equals one worker on the whole batch up to rounding, and checkpoints resume
exactly. On a cluster of several nodes, the actors go to the nodes other
than the driver's while those have room (the driver uses a CPU of its own).

Layer state (batch norm's running statistics) follows the ``threads``
operator's rule: every step, every process takes the workers' state
weighted by their shares of the records (it travels in the flat array,
after the gradients), so the driver's is what hooks, evaluation and
checkpoints see. The driver's forward pass moves its copy only for the
moment: it is put back until the sum comes, so the global state changes
only when a step is complete.

The actors take the driver's whole state (parameters, optimiser state,
freeze filters) when a run starts, after a reset, when the trainable
parameters change, and after a restart. A hook that writes parameters in
place between steps is not seen by the actors (no Sigma hook does).

Fault tolerance: the global state changes only after every actor returned,
and every wait has a limit (``timeout``). When an actor dies or does not
answer in time, the driver drops the exchange, replaces every actor that no
longer answers (a new actor, which reads its data again), logs a line naming
the worker and its node, gives every actor the global state and repeats that
step from it (the driver's own array of it stands); a worker's random stream
restarts every step from (seed, worker, step), so the repeat is exact.
``restarts`` bounds the restarts per step; past it, the run ends in one line
naming the worker and its node. An exception in a worker reaches the driver
as one :class:`~sigmann_threads.WorkerError` naming the worker and its
error.

Joining Ray (a local instance, or a cluster by ``address`` with its token)
is :mod:`sigmann_ray.cluster`'s, which also keeps Ray's own messages in a
log file. Run-file paths are resolved on each actor from the driver's
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

from sigma_core import Operator, SigmaError, load_component
from sigmann_ray import cluster
from sigmann_ray import flat
from sigmann_threads import Worker, WorkerError, base_seed, blas_threads, shard_bounds, worker_failed

log = logging.getLogger("sigma")
LOCAL_RAY = cluster.LOCAL_RAY  # kept here too: tests and benchmarks start a local instance as the operator does


class RayOperator(Operator):
    """``workers`` data-parallel workers: this process (worker 0) and Ray actors; see the module docstring."""

    argument_rules = {"workers": "int >= 1", "cpus_per_worker": "number > 0", "gpus_per_worker": "number >= 0",
                      "restarts": "int >= 0", "blas_threads": "int >= 1", "timeout": "number > 0",
                      "start_timeout": "number > 0", "connect_timeout": "number > 0"}

    def __init__(self, trainer, *, workers: int = 2, address: str | None = None, token_file: str | None = None,
                 connect_timeout: float = 30.0, start_timeout: float = 300.0, timeout: float = 300.0,
                 cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0, restarts: int = 3, blas_threads: int = 1):
        if trainer.handler is None:
            raise SigmaError(f"trainer {trainer.name!r}: initialise it before building its operator")
        super().__init__(trainer)
        where = cluster.join(address, token_file=token_file, connect_timeout=connect_timeout)
        import ray  # after joining: Ray reads its authentication mode when imported
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from sigmann_ray.worker import RayWorker

        resources = ray.cluster_resources()
        for kind, each in (("CPU", cpus_per_worker), ("GPU", gpus_per_worker)):  # the driver's share counted too
            if each and workers * each > resources.get(kind, 0):
                raise SigmaError(f"operator 'ray': {workers} workers need {workers * each:g} {kind}s, "
                                 f"{where} has {resources.get(kind, 0):g}")
        seed = base_seed(trainer.handler)
        threads = str(blas_threads)
        options = dict(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, runtime_env={"env_vars": {
            "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "NUMBA_NUM_THREADS": threads}})
        self.restarts, self.blas_threads, self._count = restarts, blas_threads, workers
        #: The actors of workers 1, 2, ... (``actors[k]`` is worker k + 1), during a run.
        self.actors: list = []
        #: Seconds to wait for an actor to start and take the state, and for anything else an actor does.
        self.start_timeout, self.timeout = start_timeout, timeout
        #: Per worker (the driver first), the node it ran on at the last synchronisation: (IP address, node id).
        self.nodes: list[tuple[str, str]] = []
        #: Seconds summed over steps, each step's slowest worker's (the driver's or an actor's): computing, and
        #: merging (adding up the workers' arrays and applying the sum); the rest of a step is transfer and waiting.
        self.busy_seconds, self.merge_seconds = 0.0, 0.0
        self._worker = Worker(trainer, 0, seed)  # the driver's rows, with worker 0's random streams
        self._here = ray.get_runtime_context().get_node_id()
        # Soft node affinity: the planned node while it has room, another one otherwise (rather than waiting).
        self._spawn = lambda index, node: RayWorker.options(**options, scheduling_strategy=(
            NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True))).remote(
            {**self._config, "handler": {**self._config["handler"], "name": self._worker_handler(trainer)}}, index,
            workers, seed, os.getcwd())
        self._homes = self._plan(ray.nodes(), cpus_per_worker, gpus_per_worker)  # per actor, the node it goes to
        self._synced, self._ahead = None, None  # _ahead: (counters, refs) of the step submitted ahead
        self._exchange = None  # how the synchronised actors' arrays travel (sigmann_ray.exchange)
        self._placement = None  # the last placement logged
        self._pids: list[int] = []  # the actors' process ids at the last synchronisation
        self._flat = self._total = None  # the driver's array of a step when it has no actors, and a step's sum
        self._merged = 0.0  # seconds the driver took to merge the last step
        self._limits = contextlib.ExitStack()  # during a run: this process's BLAS kept to blas_threads
        self._config = None  # the run file the loop was built from: each actor builds its run from it (setup)

    # -- the operator ---------------------------------------------------------------------------------
    def setup(self, loop) -> None:
        """Actors live for one run (started at its first step), so no run leaves actors holding CPUs. This
        process keeps to ``blas_threads`` meanwhile: it is a worker too."""
        if loop.config is None:
            raise SigmaError(f"operator 'ray': the run of trainer {self.trainer.name!r} was not built from a run file, "
                             "and each Ray worker builds its run (and reads its data) from one; use build_run or "
                             "sigma train")
        self._config = loop.config
        self._limits.enter_context(blas_threads(self.blas_threads))

    def step(self, batch: dict):
        """One global step: the driver's rows and every actor's, their sum applied here."""
        from sigmann_ray.exchange import LostWorker

        trainer = self.trainer
        if self._count > 1 and not self.actors:  # started here, they take the global state in the first _sync
            self.actors = [self._spawn(index + 1, node) for index, node in enumerate(self._homes)]
        places, counters = flat.layout(trainer), (trainer.total_iterations, trainer.epoch, trainer.iteration)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and (ahead[0] != counters or places != self._synced):
            ahead, self._synced = None, None  # not the step submitted ahead (a reset, new trainable parameters)
        # The next step is submitted as soon as this process has its own array of this one: the actors go on to
        # this step's sum and update while this process does its own and runs the hooks. They apply it with the
        # hyperparameters this process does, the current ones; if the next step turns out to be another, it is
        # dropped above.
        step, epoch, iteration = counters
        following = (step + 1, epoch, iteration + 1) if iteration + 1 < len(trainer.training_iterator) else (
            step + 1, epoch + 1, 0)
        hyperparameters, own, results = trainer.optimiser.hyperparameters(), None, []
        for attempt in range(self.restarts + 1):
            try:
                if places != self._synced:
                    self._sync(places)
                refs = ahead[1] if ahead else self._submit((counters, {}, None))
                mine = self._exchange.slot(step) if self.actors else self._flat  # where the driver's array goes
                if own is None:  # once: a repeated step repeats only the actors' part
                    own = (*self._own_rows(batch, counters, places, mine), mine)
                elif own[3] is not mine:  # repeated with a new exchange: the driver's array moves there
                    numpy.copyto(mine, own[3])
                    own = (*own[:3], mine)
                if self.actors:
                    self._ahead = (following, self._submit((following, hyperparameters, True)))
                    results = self._exchange.results(refs)
                break
            except LostWorker as error:
                lost = error
            index = None if lost.index is None else lost.index + 1  # the driver is worker 0
            if lost.silent:
                self._silence(index)
            self._drop_exchange()
            refs = ahead = None  # after the graph is torn down (its references then free nothing), and before
            gc.collect()  # the error: nothing read from the actors outlives a failed step
            lost_workers = self._lost(index, lost.reason)
            if attempt == self.restarts:
                raise WorkerError(self._giving_up(step + 1, lost_workers or [(None, lost.reason)], attempt + 1))
            for index, reason in lost_workers:
                log.warning("ray worker %d on %s %s in global step %d; restarted it, repeating the step from the "
                            "last synchronised state", index, self._node(index), reason, step + 1)
                self._replace(index)
        began = time.perf_counter()
        (cost, records, computing, mine), actors = own, results
        cost += sum(result[0] for result in actors)
        records += sum(result[1] for result in actors)
        self.busy_seconds += max([computing] + [result[3] for result in actors])
        self.merge_seconds += max([self._merged] + [result[4] for result in actors])  # each the last step's merge
        total = flat.add_up([mine] + [result[2] for result in actors], self._total)
        del results, actors, refs, own, mine  # not held past the step: a repeated step moves the arrays
        if records != len(batch["inputs"]):
            raise SigmaError(f"operator 'ray': the workers read {records} records of a {len(batch['inputs'])}-record "
                             "batch; the actors' data differs from the driver's")
        gradients, state = flat.unflatten(total, places, trainer.network)
        trainer.network.load_state_dict(state, partial=True)
        applied = trainer.apply_gradients(gradients, cost)
        self._merged = time.perf_counter() - began
        return applied

    def reset(self) -> None:
        """The trainer was reset: the actors take its state before the next step."""
        self._synced = None

    def teardown(self) -> None:
        """The exchange is dropped and the actors killed; BLAS gets its threads back."""
        import ray

        try:
            self._drop_exchange()
            for actor in self.actors:
                ray.kill(actor)
            self.actors = []
            # Results read in place from a compiled graph's shared memory and caught in a reference cycle crash
            # the process when freed after ray.shutdown() (SIGSEGV in MutableObjectManager::ReadRelease): free
            # them while it is mapped.
            gc.collect()
        finally:
            self._limits.close()

    # -- the driver's own rows --------------------------------------------------------------------------
    def _own_rows(self, batch: dict, counters: tuple, places: list, out) -> tuple[float, int, float]:
        """Worker 0's rows of ``batch`` into ``out``, as an actor computes its own; returns their
        (weighted) cost, their number and the seconds taken. The forward pass moves the trainer's layer state:
        it is put back, and the step's sum replaces it once every worker's array is in."""
        records = len(batch["inputs"])
        stop = shard_bounds(records, self._count)[1]
        state = {key: array.to_numpy().copy() for key, array in self.trainer.network.state.items()}
        began = time.perf_counter()
        try:
            cost = flat.contribute(self._worker, counters, {key: values[:stop] for key, values in batch.items()},
                                   stop / records, places, out)
        except Exception as error:
            raise worker_failed(0, error) from None
        finally:
            if state:
                self.trainer.network.load_state_dict(state, partial=True)
        return cost, stop, time.perf_counter() - began

    # -- the actors and their exchange -----------------------------------------------------------------
    def _worker_handler(self, trainer) -> str:
        """The handler the workers build: the driver's (``auto`` resolved once, so that one handler runs across the
        cluster; no device number, Ray gives each worker its GPUs), inside the wrapper the run names, if any
        (``debug:cpu``: every worker's ops are checked too)."""
        outer = self._config["handler"]["name"].partition(":")[0]
        wraps = outer != "auto" and hasattr(load_component("handler", outer), "around")
        return f"{outer}:{trainer.handler.name}" if wraps else trainer.handler.name

    def _plan(self, nodes: list, cpus: float, gpus: float) -> list[str]:
        """The node each actor goes to: the nodes other than this process's while they have room (by their
        CPUs and GPUs), then this one's (the driver computes there too). A preference: Ray places an actor
        elsewhere when its node is busy or gone."""
        plan = []
        for node in nodes:
            if node["Alive"] and node["NodeID"] != self._here:
                room = [node["Resources"].get(kind, 0) / each for kind, each in (("CPU", cpus), ("GPU", gpus)) if each]
                plan += [node["NodeID"]] * int(min(room))
        return (plan + [self._here] * self._count)[:self._count - 1]

    def _submit(self, order: tuple) -> list:
        """Start global step ``order`` on the actors (none: nothing to start)."""
        return self._exchange.submit(order) if self.actors else []

    def _sync(self, places: list) -> None:
        """Every actor takes the global state (dropping any step started ahead); then the exchange is made:
        shared memory and a compiled graph when every actor shares this process's node, Ray's object transfer
        otherwise."""
        import ray

        from sigmann_ray.exchange import CompiledExchange, ObjectExchange, wait

        trainer = self.trainer
        size, dtype = places[-1][2] if places else 0, trainer.handler.dtype
        self._flat = numpy.zeros(size, dtype) if not self.actors else None  # the driver's array when alone
        self._total = numpy.empty(size, dtype)
        if not self.actors:
            self._synced = places
            return
        log.debug("ray: the workers take the global state at step %d", trainer.total_iterations + 1)
        self._drop_exchange()
        state = ray.put((places, trainer.network.state_dict(), trainer.optimiser.state_dict()))
        loaded = wait([actor.load.remote(state) for actor in self.actors], self.start_timeout)
        ids, self._pids = [self._here] + [node for node, _ in loaded], [pid for _, pid in loaded]
        addresses = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
        self.nodes = [(addresses.get(node, "unknown"), node) for node in ids]
        if set(ids) == {self._here}:
            self._exchange = CompiledExchange(self.actors, size, dtype, self.timeout, self._pids)
        else:
            self._exchange = ObjectExchange(self.actors, size, dtype, self.timeout)
        placement = "ray: worker 0 (this process) on {}, {}; results through {}".format(
            self._node(0), ", ".join(f"worker {index} on {self._node(index)}" for index in range(1, len(self.nodes))),
            "shared memory and a compiled graph" if isinstance(self._exchange, CompiledExchange)
            else "Ray's object transfer")
        if placement != self._placement:  # said when the run starts and when a restart moves a worker
            log.info("%s", placement)
            self._placement = placement
        self._synced = places

    def _drop_exchange(self) -> None:
        """Drop the exchange and any step in flight (the actors keep their state)."""
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

    def _lost(self, lost: int | None, reason: str) -> list[tuple[int, str]]:
        """``(worker index, reason)`` of the worker that was lost (``lost``, None if not known) and of every
        other actor that no longer answers within the time limit (a compiled graph does not say which actor
        died: each is asked)."""
        from sigmann_ray.exchange import LostWorker, wait

        found = []
        for index, actor in enumerate(self.actors, start=1):
            if index == lost:
                found.append((index, reason))
                continue
            try:
                wait([actor.pid.remote()], self.timeout)
            except LostWorker as error:
                found.append((index, error.reason))
        return found

    def _silence(self, index: int | None) -> None:
        """End an actor that stopped answering before the exchange is dropped: tearing a compiled graph down
        waits for every actor in it. Ray ends the actor; one on this node (the compiled graph's case), which
        may be too stuck to obey Ray, is also killed as a process."""
        import ray

        from sigmann_ray.exchange import CompiledExchange

        if index is None:
            return
        ray.kill(self.actors[index - 1])
        if isinstance(self._exchange, CompiledExchange) and index - 1 < len(self._pids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._pids[index - 1], signal.SIGKILL)

    def _replace(self, index: int) -> None:
        """A new actor for worker ``index`` (it reads its data again and takes the state at the next sync)."""
        import ray

        ray.kill(self.actors[index - 1])
        self.actors[index - 1] = self._spawn(index, self._homes[index - 1])

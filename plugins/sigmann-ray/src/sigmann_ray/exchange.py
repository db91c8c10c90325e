"""How one global step's results travel between the workers and to the driver, always within a time limit.

Two ways, chosen after every synchronisation by where the workers are:

- :class:`CompiledExchange`, when every worker shares the driver's node: a
  Ray Compiled Graph (``ray.dag``) compiled once per synchronisation, whose
  shared-memory channels are allocated once (``compute`` on every worker, then
  ``gather`` on every worker: an all-gather without Ray's task launch or an
  object-store object per step). Ray 2.60's compiled graphs wait forever for
  a reader on another node (the issue this module answers), so they are kept
  to one node.
- :class:`ObjectExchange`, otherwise: one ordinary actor call per worker and
  step (``step``), whose arguments are the other workers' last results, so
  Ray's object transfer carries each result to the nodes that read it, as
  Ray Train's and Ray Core's own cross-node examples do.

Both submit a step before the driver reads the last one, so the workers go
on while the driver applies it. Every wait has a limit (``timeout``): a
worker that does not answer in time, or dies, ends the wait as
:class:`LostWorker`, which names it, and an exception inside a worker as
that worker's own one line. Neither error keeps a reference to the results
it was waiting for: a compiled graph's results are read in place from its
shared memory, and one freed after Ray has shut down crashes the process.
"""

from __future__ import annotations

import collections
import statistics
import time

import ray
from ray.dag import InputNode, MultiOutputNode
from ray.exceptions import GetTimeoutError, RayActorError, RayChannelError, RayChannelTimeoutError, RayTaskError

from sigma_core import SigmaError, describe
from sigmann_threads import WorkerError


class LostWorker(Exception):
    """A worker died or did not answer in time (``silent``): ``index`` (None when Ray cannot tell which) and
    ``reason``."""

    def __init__(self, index: int | None, reason: str, silent: bool = False):
        super().__init__(reason)
        self.index, self.reason, self.silent = index, reason, silent


def reported(error: RayTaskError) -> SigmaError:
    """A worker's exception as the driver raises it: the worker's own one line, not Ray's traceback."""
    return error.cause if isinstance(error.cause, SigmaError) else WorkerError(describe(error.cause or error))


def wait(refs: list, timeout: float) -> list:
    """The values of ``refs`` (one per worker, in worker order), each within what is left of ``timeout``."""
    deadline, values, failure = time.monotonic() + timeout, [], None
    for index, ref in enumerate(refs):
        try:
            values.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
            continue
        except GetTimeoutError:
            failure = LostWorker(index, f"did not answer within {timeout:g} s (timeout)", silent=True)
        except RayActorError as error:
            failure = LostWorker(index, f"died ({type(error).__name__})")
        except RayTaskError as error:
            failure = reported(error)
        break
    if failure is not None:  # raised here, outside the except clauses: no context holding Ray's frames
        del refs, values
        raise failure
    return values


class ObjectExchange:
    """Ordinary actor calls through Ray's object store: works wherever the workers are."""

    def __init__(self, workers: list, timeout: float):
        self.workers, self.timeout, self._last = workers, timeout, ()

    def submit(self, order: tuple) -> list:
        """Start a global step: each worker gathers the last step's results (Ray brings them), then computes."""
        self._last = [actor.step.remote(order, *self._last) for actor in self.workers]
        return self._last

    def results(self, refs: list) -> tuple[list, float]:
        """The workers' results of one step, and when they were ready (here: when the driver had them)."""
        return wait(refs, self.timeout), time.perf_counter()

    def close(self) -> None:
        self._last = ()


class CompiledExchange:
    """One compiled-graph execution per global step, the driver on the workers' node."""

    def __init__(self, workers: list, size: int, itemsize: int, timeout: float):
        with InputNode() as order:
            results = [actor.compute.bind(order) for actor in workers]
            step = MultiOutputNode(results + [actor.gather.bind(*results) for actor in workers])
        # A channel holds one result: the flat gradients and a little pickle framing.
        self._graph = step.experimental_compile(_buffer_size_bytes=size * itemsize + (1 << 16),
                                                _submit_timeout=timeout)
        self.count, self.timeout = len(workers), timeout
        self._ready, self._paces = 0.0, collections.deque(maxlen=5)
        # One empty execution, read at once: this process registers as the reader of every output channel
        # now, while every worker is alive. Ray 2.60 registers it at the first read, and a graph torn down
        # (by its own monitor thread, when a worker dies) before that aborts the process (a failed check in
        # MutableObjectProvider::RegisterReaderChannel: the dead worker's channel buffers are gone).
        try:
            self.results(self.submit(None))
        except BaseException:
            self.close()
            raise
        self._ready, self._paces = 0.0, collections.deque(maxlen=5)

    def submit(self, order: tuple) -> list:
        try:
            return self._graph.execute(order)
        except RayChannelTimeoutError:
            failure = LostWorker(None, f"did not take a step within {self.timeout:g} s (timeout)")
        raise failure

    def results(self, refs: list) -> tuple[list, float]:
        """The workers' results of one execution. Reading a compiled graph's output busy-waits, which takes a
        core from the workers on this node: so this process first sleeps until their results should be ready
        (when the last step's were, plus the recent pace: a median, so one pause is an outlier; the workers'
        clock is this node's), and only then reads, each output within the time limit."""
        if self._paces:
            time.sleep(max(0.0, self._ready + statistics.median(self._paces) - time.perf_counter()))
        outputs, failure = [], None
        for position, ref in enumerate(refs):  # every output read, gather's too
            try:
                outputs.append(ref.get(timeout=self.timeout))
                continue
            except RayChannelTimeoutError:
                failure = LostWorker(position % self.count, f"did not answer within {self.timeout:g} s (timeout)",
                                     silent=True)
            except (RayActorError, RayChannelError) as error:
                failure = LostWorker(None, f"died ({type(error).__name__})")
            except RayTaskError as error:
                failure = reported(error)
            break
        if failure is not None:  # raised outside the except clauses, holding none of the results
            del refs, outputs
            raise failure
        results, ready = outputs[:self.count], max(outputs[self.count:])
        if self._ready:
            self._paces.append(ready - self._ready)
        self._ready = ready
        return results, ready

    def close(self) -> None:
        """Tear the graph down, with any execution in flight."""
        graph, self._graph = self._graph, None
        if graph is not None:
            graph.teardown()

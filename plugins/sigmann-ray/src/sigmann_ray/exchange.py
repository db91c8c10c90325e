"""How one global step's arrays travel between the driver and the actors, always within a time limit.

The driver is worker 0: it computes its rows itself, into the exchange's
``slot``, and its array of a step goes to the actors with the order of the
next step (it is added up first). The actors' arrays of a step go to every
other actor and to the driver. Two ways, chosen after every synchronisation
by where the actors are:

- :class:`CompiledExchange`, when every actor shares the driver's node: the
  arrays in shared memory (:class:`SharedArrays`), each written where it is
  computed and read in place, and a Ray Compiled Graph (``ray.dag``),
  compiled once per synchronisation, to carry the orders and costs and to
  keep everyone in step (``compute`` on every actor, then, with several
  actors, ``gather`` on every actor: an all-gather without Ray's task launch
  or an object-store object per step). Ray 2.60's compiled graphs wait
  forever for a reader on another node (the issue this module answers), so
  they are kept to one node.
- :class:`ObjectExchange`, otherwise: one ordinary actor call per actor and
  step (``step``), whose arguments are the driver's last array (put in the
  object store once) and the actors' last results, so Ray's object transfer
  carries each to the nodes that read it, as Ray Train's and Ray Core's own
  cross-node examples do.

The driver submits a step as soon as it has its own array of the last one,
before it reads the actors' arrays, so the actors go on to the next step's
sum and update while the driver does its own. Every wait has a limit
(``timeout``): an actor that does not answer in time, or dies, ends the
wait as :class:`LostWorker`, which names its position, and an exception
inside an actor as that worker's own one line. Neither error keeps a
reference to the results it was waiting for: a compiled graph's results are
read in place from its shared memory, and one freed after Ray has shut down
crashes the process.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import tempfile
import threading
import time

import numpy
import ray
from ray.dag import InputNode, MultiOutputNode
from ray.exceptions import GetTimeoutError, RayActorError, RayChannelError, RayChannelTimeoutError, RayTaskError

from sigma_core import SigmaError, describe
from sigmann_threads import WorkerError


class LostWorker(Exception):
    """An actor died or did not answer in time (``silent``): ``index``, its position in the list the wait or
    exchange was given (None when Ray cannot tell which), and ``reason``."""

    def __init__(self, index: int | None, reason: str, silent: bool = False):
        super().__init__(reason)
        self.index, self.reason, self.silent = index, reason, silent


def reported(error: RayTaskError) -> SigmaError:
    """A worker's exception as the driver raises it: the worker's own one line, not Ray's traceback."""
    return error.cause if isinstance(error.cause, SigmaError) else WorkerError(describe(error.cause or error))


def wait(refs: list, timeout: float) -> list:
    """The values of ``refs`` (one per actor, in order), each within what is left of ``timeout``."""
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
    """Ordinary actor calls through Ray's object store: works wherever the actors are."""

    def __init__(self, actors: list, size: int, dtype, timeout: float):
        self.actors, self.timeout, self._last = actors, timeout, ()
        self._own = numpy.zeros(size, dtype)  # the driver's array of the step at hand

    def slot(self, step: int) -> numpy.ndarray:
        """Where the driver puts its array of global step ``step`` before it submits the next step."""
        return self._own

    def submit(self, order: tuple) -> list:
        """Start global step ``order = (counters, hyperparameters, True if a step came before, else None)``: each actor
        gathers the last step's arrays, the driver's and the actors' (Ray brings them), adds them up, applies
        them, then computes."""
        counters, hyperparameters, after = order
        driver = ray.put(self._own) if after else None  # once, whatever the number of actors
        self._last = [actor.step.remote((counters, hyperparameters), driver, *self._last) for actor in self.actors]
        return self._last

    def results(self, refs: list) -> list:
        """The actors' results of one step, each ``(cost, records, flat array, seconds computing, seconds
        merging)``."""
        return wait(refs, self.timeout)

    def close(self) -> None:
        self._last = ()


#: Seconds past an output's time limit before its writer's process is killed (see :func:`read_within`).
GRACE_SECONDS = 1.0


def read_within(ref, timeout: float, writer_pid: int | None):
    """``ref.get(timeout=timeout)``, the output of a compiled graph on this node, within its limit even where
    Ray's own limit does not hold: Ray 2.60's read waits past it when the writer froze holding the channel's
    lock (tried with SIGSTOP). A timer then kills the writer's process (``writer_pid``, on this node), which
    ends the read; that counts as the writer not answering in time (:class:`LostWorker`, index None: the
    caller knows the position)."""
    killed = threading.Event()

    def kill():
        killed.set()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(writer_pid, signal.SIGKILL)

    timer = threading.Timer(timeout + GRACE_SECONDS, kill) if writer_pid is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        return ref.get(timeout=timeout)
    except (RayActorError, RayChannelError):
        if killed.is_set():
            raise LostWorker(None, f"did not answer within {timeout:g} s (timeout)", silent=True) from None
        raise
    finally:
        if timer is not None:
            timer.cancel()


class SharedArrays:
    """Every worker's flat array of the last two steps, in shared memory on this node: ``arrays[step % 2]
    [worker]``. A step's arrays are written where they are computed and read where they are added up, with
    no copy in between (a channel of the compiled graph would copy each array twice: out of its writer and
    into its buffer). Two steps suffice: a worker writes step s + 2's array only after every worker has read
    step s's (the graph's order: the driver submits step s + 2 once it has read step s's results, and an
    actor computes step s + 2 after its ``gather`` of step s + 1, which waits for every actor's step s + 1,
    whose sum read step s's arrays). The memory is a file in ``/dev/shm`` that every actor maps and the
    driver then unlinks: it goes when the last process holding it does, however that process ends."""

    def __init__(self, actors: list, size: int, dtype, timeout: float):
        shape = (2, len(actors) + 1, size)
        handle, path = tempfile.mkstemp(prefix="sigma-ray-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.close(handle)
        try:
            self.arrays = numpy.memmap(path, dtype=dtype, mode="w+", shape=shape)
            wait([actor.attach.remote(path, shape) for actor in actors], timeout)
        finally:
            os.unlink(path)


class CompiledExchange:
    """One compiled-graph execution per global step, the driver on the actors' node; the arrays in shared
    memory (:class:`SharedArrays`), the graph's channels carrying the orders and the costs."""

    def __init__(self, actors: list, size: int, dtype, timeout: float, pids: list[int] = ()):
        self._shared = SharedArrays(actors, size, dtype, timeout).arrays
        self._pids = list(pids)  # the actors' processes, all on this node (see read_within)
        with InputNode() as order:
            results = [actor.compute.bind(order) for actor in actors]
            gathers = [actor.gather.bind(*results) for actor in actors] if len(actors) > 1 else []
            step = MultiOutputNode(results + gathers)
        self._graph = step.experimental_compile(_submit_timeout=timeout)
        self.count, self.timeout = len(actors), timeout
        # Each execution in flight: (when it was submitted, its global step); the actors' recent work per step.
        self._submitted, self._work = collections.deque(), collections.deque(maxlen=5)
        # One empty execution, read at once: this process registers as the reader of every output channel
        # now, while every actor is alive. Ray 2.60 registers it at the first read, and a graph torn down
        # (by its own monitor thread, when an actor dies) before that aborts the process (a failed check in
        # MutableObjectProvider::RegisterReaderChannel: the dead actor's channel buffers are gone).
        try:
            self.results(self.submit(None))
        except BaseException:
            self.close()
            raise

    def slot(self, step: int) -> numpy.ndarray:
        """Where the driver puts its array of global step ``step``: worker 0's, in shared memory."""
        return self._shared[step % 2][0]

    def submit(self, order: tuple | None) -> list:
        """Start global step ``order`` (as :meth:`ObjectExchange.submit`'s) through the graph's input."""
        try:
            refs = self._graph.execute(order)
            self._submitted.append((time.perf_counter(), None if order is None else order[0][0]))
            return refs
        except RayChannelTimeoutError:
            failure = LostWorker(None, f"did not take a step within {self.timeout:g} s (timeout)")
        except (RayActorError, RayChannelError) as error:
            failure = LostWorker(None, f"died ({type(error).__name__})")
        raise failure

    def results(self, refs: list) -> list:
        """The actors' results of the oldest execution in flight, as :meth:`ObjectExchange.results`'s (the
        arrays: views of the shared memory). Reading a compiled graph's output busy-waits, which takes a core
        from the actors on this node: so this process first sleeps until their results should be ready (when
        the execution was submitted, plus the least of the actors' recent work per step: an early estimate,
        which a late step only makes spin a little longer), and only then reads, each output within the time
        limit."""
        submitted, step = self._submitted.popleft()
        if self._work:
            time.sleep(max(0.0, submitted + min(self._work) - time.perf_counter()))
        outputs, failure = [], None
        for position, ref in enumerate(refs):  # every output read, gather's too
            writer = position % self.count
            try:
                outputs.append(read_within(ref, self.timeout, self._pids[writer] if writer < len(self._pids) else None))
                continue
            except (RayChannelTimeoutError, LostWorker):
                failure = LostWorker(writer, f"did not answer within {self.timeout:g} s (timeout)", silent=True)
            except (RayActorError, RayChannelError) as error:
                failure = LostWorker(None, f"died ({type(error).__name__})")
            except RayTaskError as error:
                failure = reported(error)
            break
        if failure is not None:  # raised outside the except clauses, holding none of the results
            del refs, outputs
            raise failure
        if step is None:  # the empty execution
            return outputs[:self.count]
        self._work.append(max(result[3] + result[4] for result in outputs[:self.count]))
        return [(cost, records, array, computing, merging) for (cost, records, _, computing, merging), array
                in zip(outputs[:self.count], self._shared[step % 2][1:])]

    def close(self) -> None:
        """Tear the graph down, with any execution in flight."""
        graph, self._graph = self._graph, None
        if graph is not None:
            graph.teardown()

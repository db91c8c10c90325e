"""Where trials train: worker processes on this machine (``--jobs``), or Ray tasks on a cluster (``--ray``).

Both take a :class:`~sigmann_tune.trial.Task`, train it apart from the
driver, and hand back its outcome; a worker that dies is an outcome too
(``{"state": "died", "reason": ...}``), and only that trial fails. Processes,
not threads: each trial has its own interpreter and BLAS pool, sized so that
``jobs`` trials share the machine's cores rather than fight over them.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import socket
from unittest import mock

from sigma_core import SigmaError, describe

from .trial import run_trial, serve

#: Environment variables that size the thread pools of BLAS, OpenMP and numba in a worker.
THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def threads_each(jobs: int) -> int:
    """Threads per trial when ``jobs`` trials share this machine's cores."""
    return max(1, (os.cpu_count() or 1) // jobs)


class ProcessWorkers:
    """``jobs`` worker processes (spawned, so nothing of the driver's state is shared), one trial each at a time.

    A worker that dies is replaced by a fresh one for the next trial.
    """

    def __init__(self, jobs: int):
        self.capacity, self.threads = jobs, threads_each(jobs)
        self._idle: list[_Process] = []
        self._busy: dict[_Process, int] = {}  # worker -> the trial number it trains

    def start(self, task) -> None:
        worker = self._idle.pop() if self._idle else _Process(self.threads)
        worker.connection.send(task)
        self._busy[worker] = task.number

    def finished(self, timeout: float) -> list[tuple[int, dict]]:
        """``(trial number, outcome)`` of the trials that ended within ``timeout`` seconds."""
        waits = {handle: worker for worker in self._busy for handle in (worker.connection, worker.process.sentinel)}
        done = []
        for worker in dict.fromkeys(waits[handle] for handle in multiprocessing.connection.wait(list(waits), timeout)):
            number, outcome = self._busy.pop(worker), worker.outcome()
            if outcome["state"] == "died":
                worker.close()
            else:
                self._idle.append(worker)
            done.append((number, outcome))
        return done

    def close(self) -> None:
        for worker in [*self._idle, *self._busy]:
            worker.close()
        self._idle, self._busy = [], {}


class _Process:
    """One spawned worker process and the pipe to it."""

    def __init__(self, threads: int):
        context = multiprocessing.get_context("spawn")
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=serve, args=(theirs,), daemon=True, name="sigma-tune-worker")
        unset = {name: str(threads) for name in THREADS if name not in os.environ}  # the user's settings win
        with mock.patch.dict(os.environ, unset):  # read by the worker's BLAS as it loads
            self.process.start()
        theirs.close()

    def outcome(self) -> dict:
        try:
            if self.connection.poll():
                return self.connection.recv()
        except (EOFError, OSError):
            pass
        self.process.join(5)
        code = self.process.exitcode
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with status {code}")
        return {"state": "died", "reason": f"its worker process (pid {self.process.pid}) {how}"}

    def close(self) -> None:
        self.connection.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


class RayWorkers:
    """Trials as Ray tasks (``ray.remote``) on the cluster at ``address`` (``auto``: the one this machine is part
    of; ``local``: a Ray instance started for this study), ``jobs`` at a time, each with one CPU."""

    def __init__(self, address: str, jobs: int, *, timeout: float = 30.0):
        import ray

        self.ray, self.capacity, self._pending, self._started = ray, jobs, {}, False
        if not ray.is_initialized():
            _reachable(address, timeout)
            try:
                ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
            except Exception as error:  # no cluster at the address, a version mismatch, ...
                raise SigmaError(f"--ray {address}: cannot connect: {describe(error)}") from None
            self._started = True
        env = dict.fromkeys(THREADS, "1")
        self._remote = ray.remote(run_trial).options(num_cpus=1, max_retries=0, runtime_env={"env_vars": env})

    def start(self, task) -> None:
        self._pending[self._remote.remote(task)] = task.number

    def finished(self, timeout: float) -> list[tuple[int, dict]]:
        if not self._pending:
            return []
        ready, _ = self.ray.wait(list(self._pending), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        return [(self._pending.pop(ref), self._outcome(ref)) for ref in ready]

    def _outcome(self, ref) -> dict:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as error:  # the worker died (killed, out of memory), the node went
            return {"state": "died", "reason": f"its Ray task failed: {describe(error)[:500]}"}

    def close(self) -> None:
        for ref in self._pending:
            self.ray.cancel(ref, force=True)
        self._pending = {}
        if self._started:
            self.ray.shutdown()


def _reachable(address: str, timeout: float) -> None:
    """Refuse, within ``timeout`` seconds, a ``host:port`` address nothing answers at (Ray would retry for long)."""
    match = re.fullmatch(r"(?:ray://)?\[?([^\]]+?)\]?:(\d+)", address)
    if not match:
        return
    try:
        socket.create_connection((match[1], int(match[2])), timeout=timeout).close()
    except OSError as error:
        raise SigmaError(f"--ray {address}: nothing answers there ({error.strerror or error})") from None

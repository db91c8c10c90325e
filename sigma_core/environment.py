"""Environment: holds trainers and runs them (Sigma's SigmaEnvironment).

Each trainer gets its own handler and operator (the single worker, or one
an ``operator`` table names, as a run file's ``[operator]``); trainers run one
after the other, or with ``concurrent=True`` each on its own thread, as Sigma's
environment starts all its operators. A handler keeps per-run state (buffer
session, tape, random generator), so concurrent trainers must not share one.
"""

from __future__ import annotations

from . import plugins
from .errors import SigmaError


class Environment:
    """A named container of trainers, each paired with a handler and an epoch budget."""

    def __init__(self, name: str = "sigma"):
        self.name = name
        self._runs = {}  # trainer name -> (trainer, handler, epochs, hooks, monitors, operator table)
        self.operators = {}

    def add_trainer(self, trainer, handler, *, epochs: int, hooks=(), monitors=(), operator: dict | None = None):
        """Add ``trainer`` to run on ``handler`` for ``epochs``, with its operator's hooks and monitors;
        ``operator`` is ``{"type": "threads", "workers": 2, ...}`` (default: the single worker)."""
        if trainer.name in self._runs:
            raise SigmaError(f"environment {self.name!r} already has a trainer named {trainer.name!r}")
        self._runs[trainer.name] = (trainer, handler, epochs, list(hooks), list(monitors), operator or {})

    @property
    def trainers(self) -> list:
        return [run[0] for run in self._runs.values()]

    def run(self, *, concurrent: bool = False) -> dict:
        """Initialise and train every trainer; return their epoch reports by trainer name.

        With ``concurrent`` this returns when all have finished, and raises the
        first failure (in the order the trainers were added) naming its trainer.
        """
        if concurrent:
            self._check_handlers_unshared()
        for name, (trainer, handler, epochs, hooks, monitors, operator) in self._runs.items():
            if trainer.handler is None:
                trainer.initialise(handler)
            self.operators[name] = plugins.build("operator", {"type": "single_worker", **operator}, trainer,
                                                 epochs=epochs, hooks=hooks, monitors=monitors,
                                                 where=f"trainer {name!r}: operator")
        if not concurrent:
            return {name: operator.run() for name, operator in self.operators.items()}
        for operator in self.operators.values():
            operator.start()
        results, failures = {}, []
        for name, operator in self.operators.items():
            try:
                results[name] = operator.join()
            except Exception as error:  # every thread is joined before one failure is raised
                failures.append((name, error))
        if failures:
            name, error = failures[0]
            raise SigmaError(f"environment {self.name!r}: trainer {name!r} failed: {error}") from error
        return results

    def _check_handlers_unshared(self):
        owners = {}
        for name, (trainer, handler, *_) in self._runs.items():
            handler = trainer.handler or handler
            if id(handler) in owners:
                raise SigmaError(f"environment {self.name!r}: trainers {owners[id(handler)]!r} and {name!r} "
                                 "share a handler, so they cannot train concurrently; give each its own")
            owners[id(handler)] = name

"""Environment: holds trainers and runs them (Sigma's SigmaEnvironment).

Each trainer gets its own handler and operator. Trainers run one after the
other; the environment is the place where monitors and, later, multi-trainer
scheduling attach.
"""

from __future__ import annotations

from .errors import SigmaError
from .operators import SingleWorkerOperator


class Environment:
    """A named container of trainers, each paired with a handler and an epoch budget."""

    def __init__(self, name: str = "sigma"):
        self.name = name
        self._runs = {}  # trainer name -> (trainer, handler, epochs, observers)
        self.operators = {}

    def add_trainer(self, trainer, handler, *, epochs: int, observers=()):
        if trainer.name in self._runs:
            raise SigmaError(f"environment {self.name!r} already has a trainer named {trainer.name!r}")
        self._runs[trainer.name] = (trainer, handler, epochs, list(observers))

    @property
    def trainers(self) -> list:
        return [run[0] for run in self._runs.values()]

    def run(self) -> dict:
        """Initialise and train every trainer; returns its epoch reports by trainer name."""
        results = {}
        for name, (trainer, handler, epochs, observers) in self._runs.items():
            if trainer.handler is None:
                trainer.initialise(handler)
            operator = SingleWorkerOperator(trainer, epochs=epochs, observers=observers)
            self.operators[name] = operator
            results[name] = operator.run()
        return results

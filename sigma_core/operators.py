"""Operators run trainers. For now there is one: a single worker on the caller's thread.

Sigma's operators split work across workers and merge their networks; the
single-worker operator is the degenerate case that keeps the same shape: it
owns the run state (running, stopped), the epoch loop and the stop criteria.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class EpochReport:
    epoch: int
    cost: float
    seconds: float
    iterations: int
    validation: dict = field(default_factory=dict)  # iterator name -> evaluate() report


class SingleWorkerOperator:
    """Runs a trainer epoch by epoch until ``epochs`` or until stopped."""

    def __init__(self, trainer, *, epochs: int, observers=()):
        self.trainer = trainer
        self.epochs = int(epochs)
        self.observers = list(observers)  # objects with on_epoch_start/on_iteration/on_epoch_end
        self.state = "none"
        self.reports: list[EpochReport] = []
        self.seconds = 0.0

    def signal_stop(self):
        """Stop after the current iteration's epoch finishes."""
        self.state = "stopped"

    def run(self) -> list[EpochReport]:
        trainer = self.trainer
        self.state = "running"
        start = time.perf_counter()
        while self.state == "running" and trainer.epoch < self.epochs:
            for observer in self.observers:
                observer.on_epoch_start(trainer, len(trainer.training_iterator))
            began = time.perf_counter()
            cost = trainer.run_epoch(on_iteration=self._on_iteration)
            seconds = time.perf_counter() - began
            validation = {name: trainer.evaluate(iterator) for name, iterator in trainer.validation.items()}
            report = EpochReport(trainer.epoch, cost, seconds, trainer.iteration, validation)
            self.reports.append(report)
            for observer in self.observers:
                observer.on_epoch_end(trainer, report)
        self.seconds = time.perf_counter() - start
        if self.state == "running":
            self.state = "stopped"
        return self.reports

    def _on_iteration(self, trainer):
        for observer in self.observers:
            observer.on_iteration(trainer)

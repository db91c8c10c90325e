"""Operators run trainers. For now there is one: a single worker on the caller's thread.

Sigma's operators split work across workers and merge their networks; the
single-worker operator is the degenerate case that keeps the same shape: it
owns the run state (running, stopped), the epoch loop, its observers (progress
bars, checkpoint savers) and its hooks (see :mod:`sigma_core.hooks`).

Hooks fire on the operator's events: ``start`` before the first iteration,
``iteration`` after each training step, ``epoch`` after each epoch's
validation, ``stop`` when the run ends normally. With one worker, local and
global hooks see the same state; locals run first. A hook that calls
:meth:`SingleWorkerOperator.signal_stop` during an iteration ends the run
after that iteration; the interrupted epoch is not reported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .hooks.dispatch import HookDispatcher
from .hooks.timestep import TimeScale


@dataclass
class EpochReport:
    epoch: int
    cost: float
    seconds: float
    iterations: int
    validation: dict = field(default_factory=dict)  # iterator name -> evaluate() report


class _StopRequested(Exception):
    """Unwinds the trainer's epoch loop after a hook signalled stop mid-epoch."""


class SingleWorkerOperator:
    """Runs a trainer epoch by epoch until ``epochs`` or until stopped."""

    def __init__(self, trainer, *, epochs: int, observers=(), hooks=()):
        self.trainer = trainer
        self.epochs = int(epochs)
        self.observers = list(observers)  # objects with on_epoch_start/on_iteration/on_epoch_end
        self.dispatcher = HookDispatcher(self)
        self.dispatcher.attach(*hooks)
        self.state = "none"
        self.reports: list[EpochReport] = []
        self.seconds = 0.0

    @property
    def hooks(self) -> list:
        """Attached hooks, including those attached because others require them."""
        return list(self.dispatcher.hooks)

    def attach_hook(self, *hooks) -> list:
        """Attach hooks (and their requirements); returns those actually added."""
        return self.dispatcher.attach(*hooks)

    def signal_stop(self):
        """Stop after the current iteration (from a hook) or after the current epoch."""
        self.state = "stopped"

    def run(self) -> list[EpochReport]:
        trainer = self.trainer
        self.state = "running"
        start = time.perf_counter()
        try:
            self.dispatcher.start(trainer, start)
            while self.state == "running" and trainer.epoch < self.epochs:
                for observer in self.observers:
                    observer.on_epoch_start(trainer, len(trainer.training_iterator))
                began = time.perf_counter()
                try:
                    cost = trainer.run_epoch(on_iteration=self._on_iteration)
                except _StopRequested:
                    break
                seconds = time.perf_counter() - began
                validation = {name: trainer.evaluate(iterator) for name, iterator in trainer.validation.items()}
                report = EpochReport(trainer.epoch, cost, seconds, trainer.iteration, validation)
                self.reports.append(report)
                self.dispatcher.event(TimeScale.EPOCH)
                for observer in self.observers:
                    observer.on_epoch_end(trainer, report)
            self.dispatcher.event(TimeScale.STOP)
        finally:
            self.dispatcher.close()
            self.seconds = time.perf_counter() - start
        self.state = "stopped"
        return self.reports

    def _on_iteration(self, trainer):
        for observer in self.observers:
            observer.on_iteration(trainer)
        self.dispatcher.event(TimeScale.ITERATION)
        if self.state != "running":
            raise _StopRequested

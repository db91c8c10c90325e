"""Terminal progress for ``sigma train``: a rich progress bar per epoch.

An observer of :class:`~sigma_core.operators.SingleWorkerOperator`: the bar
shows the running cost and iterations/s during an epoch; the finished line
keeps the epoch's mean cost, held-out accuracy and time.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class EpochProgress:
    """Draws one bar per epoch on stderr; refreshes at most ~10 times a second."""

    def __init__(self, epochs: int, console: Console | None = None):
        self.epochs = epochs
        self.console = console or Console(stderr=True)
        self._progress = None
        self._task = None
        self._started = 0.0
        self._last_refresh = 0.0

    def on_epoch_start(self, trainer, batches: int):
        if not self.console.is_terminal:  # logs and pipes get only the epoch lines
            return
        self._progress = Progress(
            TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("cost {task.fields[cost]:.4f}  {task.fields[rate]:.0f} it/s"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            "train", total=batches, epoch=trainer.epoch + 1, epochs=self.epochs, cost=float("nan"), rate=0.0
        )
        self._started = self._last_refresh = time.perf_counter()

    def on_iteration(self, trainer):
        if self._progress is None:
            return
        now = time.perf_counter()
        if now - self._last_refresh < 0.1:
            self._progress.advance(self._task)
            return
        self._last_refresh = now
        rate = trainer.iteration / max(now - self._started, 1e-9)
        self._progress.update(self._task, completed=trainer.iteration, cost=trainer.last_cost, rate=rate)

    def on_epoch_end(self, trainer, report):
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        rate = report.iterations / max(report.seconds, 1e-9)
        held_out = report.validation.get("validation")
        accuracy = f"  accuracy {held_out['accuracy']:.2%}" if held_out else ""
        self.console.print(
            f"epoch {report.epoch}/{self.epochs}  cost {report.cost:.4f}{accuracy}  "
            f"{report.iterations} it in {report.seconds:.2f}s ({rate:.0f} it/s)"
        )

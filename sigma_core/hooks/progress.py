"""The ``progress`` hook: a bar per epoch on the terminal, then one line per epoch.

The bar shows the running training cost, iterations/s and the time left; the
line replacing it, the epoch's mean training cost, each held-out iterator's
scores under its name (``validation accuracy``) and the time taken. Pipes get
only the lines, plain. If the handler compiles kernels on first use
(``compiles_kernels``) and the first iteration takes over a second, a notice
says why. ``sigma train`` attaches it unless ``--quiet``. It runs inline:
drawing is cheap, and it reads the live trainer (the cost at most ten times a second).
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from .base import Hook

COMPILING = "compiling kernels (first run only)…"


class ProgressHook(Hook):
    """Draws one bar per epoch on stderr; refreshes its numbers at most ~10 times a second."""

    name = "progress"

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self._progress = self._task = self._timer = self._status = None
        self._started = self._last_refresh = 0.0
        self._first = 0  # the iteration the bar started at (a resumed epoch does not start at 0)

    def on_start(self):
        if getattr(self.run.trainer.handler, "compiles_kernels", False):
            self._timer = threading.Timer(1.0, self._compiling)
            self._timer.daemon = True
            self._timer.start()

    def _compiling(self):  # timer thread; _end_notice waits for it
        if self.console.is_terminal:
            self._status = self.console.status(COMPILING)
            self._status.start()
        else:
            self.console.print(COMPILING, markup=False, highlight=False)

    def _end_notice(self):
        self._timer.cancel()
        self._timer.join()
        self._timer = None
        if self._status is not None:
            self._status.stop()
            self._status = None

    def on_iteration(self):
        if self._timer is not None:
            self._end_notice()
        if self._progress is None:
            if not self.console.is_terminal:
                return
            self._open_bar()
        now = time.perf_counter()
        if now - self._last_refresh < 0.1:
            self._progress.advance(self._task)
            return
        self._last_refresh = now
        trainer = self.run.trainer
        rate = (trainer.iteration - self._first) / max(now - self._started, 1e-9)
        self._progress.update(self._task, completed=trainer.iteration,
                              cost=trainer.epoch_cost / max(trainer.iteration, 1), rate=rate)

    def _open_bar(self):
        trainer = self.run.trainer
        self._progress = Progress(
            TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("train cost {task.fields[cost]:.4f}  {task.fields[rate]:,.0f} it/s  eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self._progress.start()
        self._first = trainer.iteration
        self._task = self._progress.add_task(
            "train", total=len(trainer.training_iterator), completed=trainer.iteration,
            epoch=trainer.epoch + 1, epochs=self.run.epochs, rate=0.0,
            cost=trainer.epoch_cost / trainer.iteration,
        )
        self._started = self._last_refresh = time.perf_counter()

    def on_epoch(self, report):
        self._close_bar()
        scores = "".join(f"  {name} accuracy {scores['accuracy']:.2%} cost {scores['cost']:.4f}"
                         for name, scores in report.validation.items())
        rate = report.iterations / max(report.seconds, 1e-9)
        self.console.print(f"epoch {report.epoch}/{self.run.epochs}  train cost {report.cost:.4f}{scores}  "
                           f"{report.iterations} it in {report.seconds:.2f}s ({rate:,.0f} it/s)",
                           markup=False, highlight=False, soft_wrap=True)

    def _close_bar(self):
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def detach(self):
        if self._timer is not None:  # a run that failed in its first iteration
            self._end_notice()
        self._close_bar()  # a run stopped or failed mid-epoch leaves no bar behind

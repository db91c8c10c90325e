"""The ``progress`` hook: a bar per epoch on the terminal, then one line per epoch (pipes get only the lines).

The bar shows the iteration, the running training cost, iterations/s and the time left; the line, the epoch's
mean cost, each held-out iterator's scores and the iterations trained and their time. It runs inline: drawing
is cheap, and it reads the live trainer (the cost at most ten times a second). Speed and time left count only
training time (a pause stops the clock, :attr:`ProgressHook.clock`), and a resumed epoch counts from where it
resumed. While attached, the ``sigma`` logger's stderr lines go through the bar's console (:class:`LogLines`).
If the handler compiles kernels on first use and the first iteration takes over a second, a notice says why.
"""

import datetime
import logging
import math
import sys
import threading
import time

from rich.console import Console
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from sigma_core import Hook, epoch_line

COMPILING = "compiling kernels (first run only)…"
#: Seconds between two refreshes of the bar's cost, speed and time left.
REFRESH = 0.1


class ProgressHook(Hook):
    """Draws one bar per epoch on stderr and a line per epoch; see the module docstring."""

    name = "progress"

    def __init__(self, console: Console | None = None, clock=time.perf_counter):
        self.console = console or Console(stderr=True, soft_wrap=True)  # soft wrap: a pipe gets whole lines
        self.clock = clock
        self._progress = self._task = self._timer = self._status = self._logs = None
        self._compiling = False  # the first iteration has not ended yet on a handler that compiles kernels
        self._first = 0  # the iteration the bar started at (a resumed epoch does not start at 0)
        self._trained = 0.0  # seconds of training since the bar opened, up to the last pause
        self._since = None  # when training last (re)started; None while paused
        self._last_refresh = -math.inf

    def attach(self, run):
        super().attach(run)
        self._logs = LogLines(self.console)
        self._logs.install()

    def on_start(self):
        self._compiling = bool(getattr(self.run.trainer.handler, "compiles_kernels", False))
        self._arm()

    def _arm(self):
        if self._compiling and self._timer is None:
            self._timer = threading.Timer(1.0, self._show_notice)
            self._timer.daemon = True
            self._timer.start()

    def _show_notice(self):  # timer thread; _end_notice waits for it
        if self.console.is_terminal:
            self._status = self.console.status(COMPILING)
            self._status.start()
        else:
            self.console.print(COMPILING, markup=False, highlight=False)

    def _end_notice(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
            self._timer = None
        if self._status is not None:
            self._status.stop()
            self._status = None

    def on_pause(self):
        self._end_notice()  # re-armed on resume if the first iteration is still to come
        if self._since is not None:
            self._trained += self.clock() - self._since
            self._since = None

    def on_resume(self):
        self._arm()
        if self._progress is not None:
            self._since = self.clock()

    def on_iteration(self):
        if self._compiling:
            self._compiling = False
            self._end_notice()
        if self._progress is None:
            if not self.console.is_terminal:
                return
            self._open_bar()
        trainer = self.run.trainer
        self._progress.update(self._task, completed=trainer.iteration)
        now = self.clock()
        if now - self._last_refresh >= REFRESH:
            self._last_refresh = now
            self._progress.update(self._task, **self.figures(now))

    def figures(self, now: float) -> dict:
        """The bar's running numbers at ``now``: mean cost so far, speed and time left (``…`` until known)."""
        trainer = self.run.trainer
        seconds = self._trained + (now - self._since if self._since is not None else 0.0)
        done = trainer.iteration - self._first
        rate = done / seconds if done > 0 and seconds > 0 else None
        left = max(len(trainer.training_iterator) - trainer.iteration, 0)
        return {"cost": f"{trainer.epoch_cost / max(trainer.iteration, 1):.4f}",
                "speed": "…" if rate is None else f"{rate:,.0f}",
                "eta": "…" if rate is None else str(datetime.timedelta(seconds=round(left / rate)))}

    def _open_bar(self):
        trainer = self.run.trainer
        self._progress = Progress(
            TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("train cost {task.fields[cost]}  {task.fields[speed]} it/s  eta {task.fields[eta]}"),
            console=self.console, transient=True)
        self._progress.start()
        self._first, self._trained = trainer.iteration, 0.0
        self._since = self._last_refresh = self.clock()
        self._task = self._progress.add_task(
            "train", total=len(trainer.training_iterator), completed=trainer.iteration,
            epoch=trainer.epoch + 1, epochs=self.run.epochs, **self.figures(self._since))

    def on_reset(self):
        self._close_bar()  # the epoch starts again from its first iteration: a bar of its own

    def on_epoch(self, report):
        self._close_bar()
        self.console.print(epoch_line(report, self.run.epochs), markup=False, highlight=False, soft_wrap=True)

    def _close_bar(self):
        if self._progress is not None:
            self._progress.stop()
            self._progress = self._since = None

    def detach(self):
        self._end_notice()  # a run that failed in its first iteration
        self._close_bar()  # a run stopped or failed mid-epoch leaves no bar behind
        if self._logs is not None:
            self._logs.remove()
            self._logs = None


class LogLines(RichHandler):
    """The ``sigma`` logger's lines, printed through ``console`` (above a live bar, not glued onto it) as
    ``sigma: <message>``, in place of the logger's stderr handlers from :meth:`install` until :meth:`remove`."""

    def __init__(self, console: Console):
        super().__init__(console=console, markup=False, highlighter=NullHighlighter())
        self.setFormatter(logging.Formatter("sigma: %(message)s"))
        self._replaced = []

    def render(self, *, record, traceback, message_renderable):
        return message_renderable  # the line itself: no time, level or source columns

    def install(self) -> None:
        logger = logging.getLogger("sigma")
        self._replaced = [handler for handler in logger.handlers if isinstance(handler, logging.StreamHandler)
                          and getattr(handler, "stream", None) in (sys.stderr, sys.__stderr__)]
        for handler in self._replaced:
            logger.removeHandler(handler)
        if self._replaced:
            self.setLevel(min(handler.level for handler in self._replaced))
            logger.addHandler(self)

    def remove(self) -> None:
        logger = logging.getLogger("sigma")
        logger.removeHandler(self)
        for handler in self._replaced:
            logger.addHandler(handler)
        self._replaced = []

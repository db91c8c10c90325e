"""The ``plots`` hook: ``metrics.png`` in the run directory, redrawn after every epoch.

It sends the records the ``metrics`` hook would write (the same
:func:`sigma_core.record`: every ``every`` iterations and every
epoch) to a drawing process, which draws them as ``sigma plot`` does into
``<directory>/metrics.png`` (``directory`` defaults to the run's own directory,
``run.directory``: ``runs/<run name>/version_N``).
A separate process because drawing is mostly Python: on a thread it would
hold the interpreter lock the training thread needs. When epochs end faster
than it draws, it draws the newest (see :mod:`sigmann_plots.worker`), and
always the last.

A resumed run's drawing starts from the records its directory's
``metrics.jsonl`` holds up to the step it resumes from, so the curves show the
whole run, not only what followed the resume.

A run directory that cannot be written is refused when the run starts, and a
drawing process that has died (its own line says why) fails the hook at its
next record: either way one line, the hook detached, training going on.
"""

from __future__ import annotations

import json
import subprocess
import sys

from sigma_core import HookError, SigmaError, check_writable
from sigmann_monitors import MetricsHook, read_history


class PlotsHook(MetricsHook):
    """A :class:`~sigmann_monitors.MetricsHook` whose records go to a drawing process instead of files."""

    name = "plots"

    def __init__(self, directory: str | None = None, every: int = 10):
        super().__init__(directory, every)
        self.worker = None

    def open(self):
        check_writable(self.directory / "metrics.png", what="plots")  # now, not when the first epoch is drawn
        command = [sys.executable, "-m", "sigmann_plots.worker", str(self.directory / "metrics.png"), self.run.name]
        self.worker = subprocess.Popen(command, stdin=subprocess.PIPE, text=True, bufsize=1)
        start = self.run.values["total_iterations"]
        if start and (self.directory / "metrics.jsonl").is_file():  # resumed: what was drawn before
            try:
                earlier = read_history(self.directory, end=start).records  # of a long run, a chart's worth
            except SigmaError:
                earlier = []  # nothing readable: draw from here on
            for row in earlier:
                self.write(row)

    def write(self, row: dict):
        try:
            self.worker.stdin.write(json.dumps(row) + "\n")
        except BrokenPipeError:  # its own line, if it could write one, said why
            raise HookError(f"plots: the drawing process has ended (exit status {self.worker.wait()})") from None

    def on_stop(self):
        """Let the last epoch be drawn before the run is reported finished."""
        self.worker.stdin.close()
        self.worker.wait()

    def detach(self):
        if self.worker is not None:
            if not self.worker.stdin.closed:
                self.worker.stdin.close()  # it draws what it has and exits
            self.worker = None

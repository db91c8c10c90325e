"""The ``metrics`` hook: every reported value, appended to ``metrics.csv`` and ``metrics.jsonl``.

Both go into ``directory``, by default the run's own, where ``sigma plot`` and ``sigma dashboard`` read them.
Each event is one :func:`record` (``epoch`` 1 for the first, ``iteration`` within it, ``step`` in all), and the
end of the run a ``stop`` record (``stopped``: what stopped it early, or null). ``metrics.csv`` is long, one
value per row under :data:`HEADER`, so a key that appears mid-run needs no new column. A resumed run drops the
records past its step and appends. Records are flushed one by one on the hook's own thread (``threaded``), so a
crash loses at most one and a slow disk never holds training up.
"""

import csv
import json
from pathlib import Path

import numpy

from sigma_core import Hook, HookError, atomic_write, check_writable, epoch_values

HEADER = ("time", "event", "epoch", "iteration", "step", "name", "value")


def record(event: str, values, report=None, extra: dict | None = None) -> dict:
    """One ``iteration`` or ``epoch`` event as the files hold it, from the event's run ``values`` (and ``report``);
    of ``extra`` (more run values by name), numbers are kept and arrays become their mean."""
    row = {"time": round(values["time"], 3), "event": event, "step": values["total_iterations"]}
    if report is None:
        row.update(epoch=values["epoch"] + 1, iteration=values["iteration"], cost=values["cost"])
    else:
        row.update(epoch=report.epoch, iteration=report.iterations, **epoch_values(report))
    row["learning_rate"] = values["learning_rate"]
    for key, value in (extra or {}).items():
        if isinstance(value, numpy.ndarray) and value.dtype.kind in "biuf":
            value = float(value.mean())
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            row.setdefault(key, value)
    return row


class MetricsHook(Hook):
    """Appends a record per iteration (every ``every``) and per epoch to ``metrics.csv`` and ``metrics.jsonl``."""

    name = "metrics"
    HEADER = HEADER  # the columns every record has; for hooks that write the same records elsewhere
    threaded = True
    argument_rules = {"every": "int >= 0", "values": "names"}  # checked when built from a run file or --monitor

    def __init__(self, directory: str | None = None, every: int = 10, values: list | str = ()):
        self.patterns = [values] if isinstance(values, str) else list(values)
        self.directory, self.every = directory, every
        self.reads = {"on_iteration": ("cost", *self.patterns), "on_epoch": tuple(self.patterns)}
        self._csv = self._jsonl = None

    def attach(self, run):
        super().attach(run)
        self.directory = Path(self.directory) if self.directory else run.directory

    def on_start(self):
        self.open()

    def open(self):
        """Open both files for appending, without the records past the step this run starts from."""
        check_writable(self.directory, folder=True, what="run directory")
        start = self.run.values["total_iterations"]
        self._csv = _reopen(self.directory / "metrics.csv", start, csv_file=True)
        self._writer = csv.writer(self._csv, lineterminator="\n")
        if self._csv.tell() == 0:
            self._writer.writerow(HEADER)
        self._jsonl = _reopen(self.directory / "metrics.jsonl", start)

    def on_epoch(self, report=None):
        values = self.run.values
        self.write(record("iteration" if report is None else "epoch", values, report, values.matching(self.patterns)))

    on_iteration = on_epoch

    def on_stop(self):
        values, stopped = self.run.values, self.run.loop.stopped
        self.write({"time": round(values["time"], 3), "event": "stop", "epoch": values["epoch"],
                    "iteration": values["iteration"], "step": values["total_iterations"], "epochs": self.run.epochs,
                    "stopped": stopped and stopped.reason})

    def write(self, row: dict):
        head = [row[key] for key in HEADER[:5]]
        self._writer.writerows([*head, name, value] for name, value in row.items() if name not in HEADER)
        self._jsonl.write(json.dumps(row) + "\n")
        self._csv.flush()  # once per record: each write lets the training thread in and out again
        self._jsonl.flush()

    def detach(self):
        for stream in (self._csv, self._jsonl):
            if stream is not None:
                stream.close()
        self._csv = self._jsonl = None


def _reopen(path: Path, step: int, csv_file: bool = False):
    """``path`` opened for appending, without its records past ``step`` (a resumed run trains them again), its
    ``stop`` records and lines a crash cut short (rewritten atomically); a CSV file must start with :data:`HEADER`."""
    def kept(line):
        try:
            row = next(csv.reader([line])) if csv_file else json.loads(line)
            at, event = (row[4], row[1]) if csv_file else (row["step"], row["event"])
            return int(at) <= step and event != "stop"
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):
            return False

    lines = []
    if path.exists():
        with path.open(newline="", encoding="utf-8", errors="replace") as stream:
            lines = stream.readlines()
    header = lines[:1] if csv_file else []
    if header and next(csv.reader(header)) != list(HEADER):
        raise HookError(f"{path}: not a metrics file (its first line is not {','.join(HEADER)}); "
                        "choose another directory")
    kept_lines = header + [line for line in lines[len(header):] if kept(line)]
    kept_lines = [line if line.endswith("\n") else line + "\n" for line in kept_lines]  # a cut-short header too
    if kept_lines != lines:
        with atomic_write(path, "w", what="metrics file") as stream:
            stream.writelines(kept_lines)
    return path.open("a", newline="", encoding="utf-8")


#: What a record of :func:`record` is, as :func:`sigma_core.config.require` checks it (:mod:`sigmann_monitors.history`
#: reads the files): its counters, and numbers.
RECORD = {"event": ("iteration", "epoch", "stop"), "epoch": "int >= 0", "iteration": "int >= 0",
          "step": "int >= 0", ...: "real or null"}

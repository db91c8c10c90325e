"""The ``metrics`` monitor: every reported value, appended to a CSV and a JSON-lines file.

Both go into the run directory, ``directory`` (default ``runs/<run name>``
under the current directory, where the ``tensorboard`` and ``plots`` monitors
write too and ``sigma plot`` reads): ``metrics.csv`` and ``metrics.jsonl``.

Each event is one record. Every ``every``-th iteration (default 10; 0: none):
that iteration's ``cost`` and the ``learning_rate``. After each epoch: the
epoch's mean training ``cost``, ``learning_rate``, ``iterations_per_s``,
``seconds`` and each held-out iterator's scores as ``<iterator>.<score>``
(``validation.accuracy``, ``validation.cost``). Both also carry the registry
keys named in ``values`` (wildcards and tags as hooks use them:
``values = ["shared.metrics.*"]``): numbers, and arrays as their mean. A record's
``epoch`` is the epoch it belongs to (1 for the first), ``iteration`` the
iteration within it and ``step`` the iterations trained in all.

``metrics.jsonl`` has one object per record. ``metrics.csv`` is long: one
value per row under the fixed header ``time,event,epoch,iteration,step,name,value``,
so a key that appears mid-run needs no new column, and a resumed run
(``--resume``) appends under the header already there. Both are flushed after
every record: a crash loses at most the record being written. The monitor
runs on its own thread (``threaded``), so a slow disk never holds training up.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy

from .errors import SigmaError
from .monitors import Monitor, MonitorError

HEADER = ("time", "event", "epoch", "iteration", "step", "name", "value")


def record(event: str, values: dict, report=None, read: dict | None = None) -> dict:
    """One ``iteration`` or ``epoch`` event as the files hold it, from a monitor's ``values``, ``read`` and ``report``.

    Of ``read``, numbers are kept and arrays become their mean; anything else is left out.
    """
    row = {"time": round(values["time"], 3), "event": event, "step": values["total_iterations"]}
    if report is None:
        row.update(epoch=values["epoch"] + 1, iteration=values["iteration"], cost=values["optimiser.cost_total"])
    else:
        row.update(epoch=report.epoch, iteration=report.iterations, cost=report.cost,
                   iterations_per_s=report.iterations / max(report.seconds, 1e-9), seconds=report.seconds)
        row.update((f"{name}.{score}", float(value)) for name, scores in report.validation.items()
                   for score, value in scores.items() if score not in ("records", "top1"))  # top1 is accuracy
    row["learning_rate"] = values["optimiser.learning_rate"]
    for key, value in (read or {}).items():
        if isinstance(value, numpy.ndarray) and value.dtype.kind in "biuf":
            row[key] = float(value.mean())
        elif isinstance(value, (int, float)):
            row[key] = value
    return row


class MetricsMonitor(Monitor):
    """Appends a record per iteration (every ``every``) and per epoch to ``metrics.csv`` and ``metrics.jsonl``."""

    threaded = True
    argument_rules = {"every": "int >= 0", "values": "names"}  # checked when built from a run file or --monitor

    def __init__(self, directory: str | None = None, every: int = 10, values: list | str = ()):
        super().__init__()
        values = [values] if isinstance(values, str) else list(values)
        self.directory, self.every = directory, every
        self.reads = {"on_iteration": values, "on_epoch": values} if values else {}
        self._csv = self._jsonl = None

    def on_start(self):
        self.directory = Path(self.directory or Path("runs") / self.trainer.name)
        self.open()

    def open(self):
        """Open both files for appending, checking that an existing CSV is one of ours."""
        self.directory.mkdir(parents=True, exist_ok=True)
        csv_path = self.directory / "metrics.csv"
        fresh = not csv_path.exists() or csv_path.stat().st_size == 0
        if not fresh:
            with csv_path.open(newline="") as stream:
                if next(csv.reader(stream), None) != list(HEADER):
                    raise MonitorError(f"{csv_path}: not a metrics file (its first line is not {','.join(HEADER)}); "
                                       "choose another directory")
        self._csv = _append(csv_path)
        self._writer = csv.writer(self._csv, lineterminator="\n")
        if fresh:
            self._writer.writerow(HEADER)
        self._jsonl = _append(self.directory / "metrics.jsonl")

    def on_iteration(self):
        self.write(record("iteration", self.values, read=self.read))

    def on_epoch(self, report):
        self.write(record("epoch", self.values, report, self.read))

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
        super().detach()


def _append(path: Path):
    """``path`` opened for appending; a line cut short by a crash is ended first."""
    stream = path.open("a", newline="", encoding="utf-8")
    if stream.tell() > 0:
        with path.open("rb") as tail:
            tail.seek(-1, 2)
            if tail.read(1) != b"\n":
                stream.write("\n")
    return stream


def read_metrics(directory) -> tuple[Path, list[dict]]:
    """The records of ``directory``'s ``metrics.jsonl`` (or of that file itself), in step order.

    What ``sigma plot`` and ``sigma dashboard`` read back. A line cut short by a
    crash is skipped; a step logged twice (trained again after a resume) keeps
    its last record.
    """
    path = Path(directory)
    path = path / "metrics.jsonl" if path.is_dir() else path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise SigmaError(f"{path}: cannot read it ({error.strerror or error}); train with --monitor metrics "
                         "and give the run directory it wrote, e.g. runs/digits") from None
    records = {}
    for line in lines:
        try:
            row = json.loads(line)
            records[row["event"], row["step"]] = row
        except (ValueError, KeyError, TypeError):
            continue
    if not records:
        raise SigmaError(f"{path}: no metrics records in it")
    return path, sorted(records.values(), key=lambda r: (r["step"], r["event"] == "epoch"))

"""The ``metrics`` hook: every reported value, appended to a CSV and a JSON-lines file.

Both go into ``directory``, by default the run's own directory
(``run.directory``: ``runs/<run name>/version_N``, see :mod:`sigma_core.rundir`),
where the ``tensorboard`` and ``plots`` hooks write too and ``sigma plot``
reads: ``metrics.csv`` and ``metrics.jsonl``.

Each event is one record (:func:`record`). Every ``every``-th iteration
(default 10; 0: none): that iteration's ``cost`` and the ``learning_rate``.
After each epoch: the epoch's mean training ``cost``, ``learning_rate``,
``iterations_per_s``, ``seconds`` and each held-out iterator's scores as
``<iterator>.<score>`` (``validation.accuracy``, ``validation.cost``). Both
also carry the run values named in ``values`` (wildcards allowed:
``values = ["network.layers.*.weights", "bits_per_character.*"]``): numbers,
and arrays as their mean. A record's ``epoch`` is the epoch it belongs to (1
for the first), ``iteration`` the iteration within it and ``step`` the
iterations trained in all. When the run ends (``on_stop``), one ``stop``
record: ``epoch`` the epochs done, ``epochs`` the epochs planned and
``stopped`` what stopped the run early (``"Ctrl-C"``; null when its epochs
ran out): what ``sigma dashboard`` shows a finished run by.

``metrics.jsonl`` has one object per record. ``metrics.csv`` is long: one
value per row under the fixed header ``time,event,epoch,iteration,step,name,value``,
so a key that appears mid-run needs no new column. A resumed run
(``--resume``) continues its own directory's files: the records past the step
it resumes from (trained after the checkpoint, and now trained again) and the
old ``stop`` record are dropped from both files when it starts, and it appends
under the header already there. Both are flushed after every record: a crash
loses at most the record being written. The hook runs on its own thread
(``threaded``), so a slow disk never holds training up.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy

from ..atomic import atomic_write, check_writable
from ..config import require
from ..errors import ConfigError, SigmaError
from ..reading import check_readable
from .base import Hook, HookError
from .values import epoch_values

HEADER = ("time", "event", "epoch", "iteration", "step", "name", "value")


def record(event: str, values, report=None, extra: dict | None = None) -> dict:
    """One ``iteration`` or ``epoch`` event as the files hold it, from the event's run ``values`` (and ``report``).

    Of ``extra`` (more run values by name), numbers are kept and arrays become their mean.
    """
    row = {"time": round(values["time"], 3), "event": event, "step": values["total_iterations"]}
    if report is None:
        row.update(epoch=values["epoch"] + 1, iteration=values["iteration"], cost=values["cost"])
    else:
        row.update(epoch=report.epoch, iteration=report.iterations, **epoch_values(report))
    row["learning_rate"] = values["learning_rate"]
    for key, value in (extra or {}).items():
        if key in row:
            continue
        if isinstance(value, numpy.ndarray) and value.dtype.kind in "biuf":
            row[key] = float(value.mean())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            row[key] = value
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
        """Open both files for appending, checking that an existing CSV is one of ours and dropping the records
        past the step this run starts from."""
        check_writable(self.directory, folder=True, what="run directory")
        csv_path = self.directory / "metrics.csv"
        fresh = not csv_path.exists() or csv_path.stat().st_size == 0
        if not fresh:
            with csv_path.open(newline="") as stream:
                if next(csv.reader(stream), None) != list(HEADER):
                    raise HookError(f"{csv_path}: not a metrics file (its first line is not {','.join(HEADER)}); "
                                    "choose another directory")
        start = self.run.values["total_iterations"]
        if not fresh:
            _keep_until(csv_path, start, lambda row: (row[4], row[1]), csv_rows=True)
        jsonl_path = self.directory / "metrics.jsonl"
        if jsonl_path.exists():
            _keep_until(jsonl_path, start, lambda row: (row["step"], row["event"]))
        self._csv = _append(csv_path)
        self._writer = csv.writer(self._csv, lineterminator="\n")
        if fresh:
            self._writer.writerow(HEADER)
        self._jsonl = _append(jsonl_path)

    def on_iteration(self):
        values = self.run.values
        self.write(record("iteration", values, extra=values.matching(self.patterns)))

    def on_epoch(self, report):
        values = self.run.values
        self.write(record("epoch", values, report, values.matching(self.patterns)))

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


def _keep_until(path: Path, step: int, key, csv_rows: bool = False) -> None:
    """Rewrite ``path`` (atomically) without its records past ``step`` and its ``stop`` records; ``key`` gives a
    record's (step, event). A line that cannot be read as a record goes too (a crash cut it short)."""
    with path.open(newline="", encoding="utf-8", errors="replace") as stream:
        rows = list(csv.reader(stream)) if csv_rows else stream.read().splitlines()
    kept = rows[:1] if csv_rows else []  # the CSV's header
    for row in rows[len(kept):]:
        try:
            at, event = key(row if csv_rows else json.loads(row))
            if int(at) <= step and event != "stop":
                kept.append(row)
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):
            continue
    if len(kept) == len(rows):
        return
    with atomic_write(path, "w", what="metrics file") as stream:
        if csv_rows:
            csv.writer(stream, lineterminator="\n").writerows(kept)
        else:
            stream.writelines(line + "\n" for line in kept)


def _append(path: Path):
    """``path`` opened for appending; a line cut short by a crash is ended first."""
    stream = path.open("a", newline="", encoding="utf-8")
    if stream.tell() > 0:
        with path.open("rb") as tail:
            tail.seek(-1, 2)
            if tail.read(1) != b"\n":
                stream.write("\n")
    return stream


#: What a record of :func:`record` is, as :func:`sigma_core.config.require` checks it: its counters, and numbers.
RECORD = {"event": ("iteration", "epoch", "stop"), "epoch": "int >= 0", "iteration": "int >= 0",
          "step": "int >= 0", ...: "real or null"}


def read_metrics(directory) -> tuple[Path, list[dict]]:
    """The records of ``directory``'s ``metrics.jsonl`` (or of that file itself), in step order.

    What ``sigma plot`` and ``sigma dashboard`` read back. A line that is not a
    JSON object (cut short by a crash, or not text at all) is skipped; an object
    that is not a record (:data:`RECORD`: a missing counter, a string where a
    number belongs) is an error naming its line. A step logged twice (trained
    again after a resume) keeps its last record. ``stop`` records are among
    them (the last one says how the run ended).
    """
    path = Path(directory)
    path = check_readable(path / "metrics.jsonl" if path.is_dir() else path, SigmaError, "metrics file")
    try:
        lines = path.read_bytes().splitlines()
    except OSError as error:
        raise SigmaError(f"{path}: cannot read it ({error.strerror or error}); train with --monitor metrics "
                         "and give the run directory it wrote, e.g. runs/digits") from None
    records = {}
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # undecodable bytes and bad JSON are ValueErrors
            continue
        if not isinstance(row, dict):
            continue
        try:
            require("", RECORD, {key: value for key, value in row.items() if key != "stopped"}, complete=True)
            require("stopped", "str or null", row.get("stopped"))  # a stop record's reason
        except ConfigError as error:
            raise SigmaError(f"{path} line {number}: not a metrics record ({error})") from None
        records[row["event"], row["step"]] = row
    if not records:
        raise SigmaError(f"{path}: no metrics records in it")
    return path, sorted(records.values(), key=lambda r: (r["step"], r["event"] == "epoch"))

"""Reading a run's ``metrics.jsonl`` at any length: every record (:func:`read_metrics`), a chart's worth of them
(:func:`read_history`), or what a growing file gained since it was last read (:func:`read_new`).

A long run's file reaches hundreds of megabytes, so nothing here holds a whole file: it is read a few megabytes at
a time, each block decoded by msgspec's C JSON decoder (some five times as fast as the standard library's) and
checked by the block (a block that fails the quick checks is read again line by line, to name the bad line).
:func:`read_history` decodes a block into Structs of the file's own keys instead of dicts (:mod:`.typed`): the
checks are then msgspec's, in C, and a series' values reach NumPy without Python code per record.
For a chart, :func:`read_history` keeps of each series (one value of the iteration records, or of the epoch
records) and each of about ``points / 2`` equal ranges of steps the record with the least and the one with the
greatest value: min/max downsampling keeps every spike, which taking every n-th record would miss, in a bounded
number of points (TensorBoard keeps about 1,000 a scalar). Records lie in step order in a metrics file (a resumed
run rewrites it up to its step before appending), so the records of a range of steps, a zoomed chart's, are
found by bisection over byte offsets, and only that part of the file is read.
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import dataclass
from itertools import chain, compress
from operator import itemgetter
from pathlib import Path

import msgspec
import numpy

from sigma_core import ConfigError, SigmaError, check_readable, require

from .metrics import RECORD
from .typed import Layouts

#: Points a chart gets of each series, by default: half of them each range's least value, half its greatest.
POINTS = 1000
#: Bytes read and decoded at a time.
BLOCK = 1 << 22
#: Keys that place a record rather than measure something: never a series of their own.
COUNTERS = ("time", "event", "epoch", "iteration", "step", "epochs", "stopped")
_DECODER = msgspec.json.Decoder(dict[str, int | float | str | None])


@dataclass
class History:
    """A run's records as a chart needs them (see :func:`read_history`)."""

    path: Path
    records: list[dict]  # iteration and epoch records, downsampled, in step order
    stop: dict | None = None  # the last stop record: how the run ended, if it did
    last: dict | None = None  # the last iteration or epoch record
    epochs: int = 0  # epoch records read
    iterations_per_epoch: int = 0  # the most iterations an epoch record counts
    offset: int = 0  # bytes read: where :func:`read_new` goes on from
    read: int = 0  # records read


def metrics_path(directory) -> Path:
    """``directory``'s ``metrics.jsonl`` (or ``directory`` itself, a file), checked readable."""
    path = Path(directory)
    return check_readable(path / "metrics.jsonl" if path.is_dir() else path, SigmaError, "metrics file")


def read_metrics(directory) -> tuple[Path, list[dict]]:
    """Every record of ``directory``'s ``metrics.jsonl`` (or of that file itself), in step order, ``stop`` records
    included: for a reader that needs them all, not for a chart (:func:`read_history`).

    A line that is not a JSON object (cut short by a crash) is skipped; an object that is not a :data:`RECORD` is
    an error naming its line. A step logged twice (trained again after a resume) keeps its last record.
    """
    path = metrics_path(directory)
    records = [row for rows, _ in _blocks(path) for row in rows]
    if not records:
        raise SigmaError(f"{path}: no metrics records in it")
    return path, _in_step_order(records)


def read_history(directory, start: float | None = None, end: float | None = None, points: int = POINTS) -> History:
    """The records of ``directory``'s ``metrics.jsonl`` (or of that file) between steps ``start`` and ``end``
    (None: the file's first and last), downsampled to about ``points`` of each series, with what a dashboard
    says about the run (:class:`History`); errors as :func:`read_metrics`'s."""
    path = metrics_path(directory)
    zoomed = start is not None or end is not None
    low = _step_after(path, 0) if start is None else start
    high = _last_step(path) if end is None else end
    history, layouts = History(path, []), Layouts()  # records are read as Structs (:mod:`.typed`)
    series: dict[tuple[str, str], Extremes] = {}
    buckets = max(1, points // 2)
    stop = last = None
    for block, (rows, history.offset) in enumerate(_blocks(path, _offset_of(path, low) if zoomed else 0, layouts)):
        past = False
        if zoomed and rows:
            steps = layouts.column(rows, "step")
            past, rows = steps[-1] > high, list(compress(rows, (low <= steps) & (steps <= high)))
        history.read += len(rows)
        groups = layouts.by_event(rows)
        stop = groups["stop"][-1] if groups["stop"] else stop
        last = next((row for row in reversed(rows) if layouts.event(row) != "stop"), last)
        if groups["epoch"]:
            history.epochs += len(groups["epoch"])
            history.iterations_per_epoch = max(history.iterations_per_epoch,
                                               int(layouts.column(groups["epoch"], "iteration").max()))
        for event in ("iteration", "epoch"):
            _keep_extremes(block, groups[event], layouts, series, low, high, buckets)
        if past:
            break
    if not zoomed and not history.read:
        raise SigmaError(f"{path}: no metrics records in it")
    chosen = {id(row): (at, row) for extremes in series.values() for at, row in extremes.rows()}
    if last is not None:
        chosen[id(last)] = ((math.inf, 0), last)
    history.records = _in_step_order(layouts.as_dict(row) for _, row in sorted(chosen.values(), key=itemgetter(0)))
    history.last, history.stop = (layouts.as_dict(row) if row is not None else None for row in (last, stop))
    return history


def read_new(path: Path, offset: int) -> tuple[list[dict], int]:
    """The records ``path`` gained past byte ``offset`` (whole lines only), and the offset to go on from."""
    rows, end = [], offset
    for block, end in _blocks(path, offset):
        rows += block
    return rows, end


class Extremes:
    """Of one series, for each of ``buckets`` equal ranges of steps in [low, high], the record with the least
    value and the one with the greatest seen so far, each with where it was read: (block, index in it)."""

    def __init__(self, buckets: int, low: float, high: float):
        self.buckets, self.low, self.width = buckets, low, max(high - low, 1) / buckets
        self.least = numpy.full(buckets, math.inf)
        self.most = numpy.full(buckets, -math.inf)
        self.least_row: list = [None] * buckets
        self.most_row: list = [None] * buckets

    def add(self, block: int, steps: numpy.ndarray, values: numpy.ndarray, rows: list, at) -> None:
        """Take the ``rows`` of block ``block`` (its records at ``at``) of this series, their ``steps`` and finite
        ``values``, into account."""
        bucket = numpy.clip(((steps - self.low) // self.width).astype(numpy.int64), 0, self.buckets - 1)
        # runs of records in one bucket: a block's are a few long runs, records lying in step order (in any other
        # order the runs are shorter, and the answer the same)
        starts = numpy.r_[0, numpy.flatnonzero(numpy.diff(bucket)) + 1]
        lengths = numpy.diff(numpy.r_[starts, len(bucket)])
        for reduce, better, best, kept in ((numpy.minimum, operator.lt, self.least, self.least_row),
                                           (numpy.maximum, operator.gt, self.most, self.most_row)):
            hits = numpy.flatnonzero(values == numpy.repeat(reduce.reduceat(values, starts), lengths))
            run = numpy.searchsorted(starts, hits, "right")
            for i in hits[numpy.r_[0, numpy.flatnonzero(numpy.diff(run)) + 1]]:  # each run's first extreme
                if better(values[i], best[bucket[i]]):  # a constant series: one record is least and greatest
                    best[bucket[i]], kept[bucket[i]] = values[i], ((block, at[i]), rows[i])

    def rows(self) -> list[tuple]:
        """``((block, index), record)`` of each bucket's least and greatest."""
        return [kept for kept in self.least_row + self.most_row if kept is not None]


def _keep_extremes(block: int, rows: list, layouts: Layouts, series: dict, low: float, high: float,
                   buckets: int) -> None:
    """Add block ``block``'s ``rows`` of one event (Structs of one type) to each of their series' :class:`Extremes`."""
    if not rows:
        return
    event, keys = layouts.kinds[type(rows[0])]
    steps = layouts.column(rows, "step")
    for key in keys:
        if key in COUNTERS:
            continue
        values = layouts.column(rows, key)
        finite = numpy.flatnonzero(numpy.isfinite(values))
        if len(finite):
            extremes = series.get((event, key)) or series.setdefault((event, key), Extremes(buckets, low, high))
            extremes.add(block, steps[finite], values[finite],
                         rows if len(finite) == len(rows) else [rows[i] for i in finite], finite)


def _blocks(path: Path, offset: int = 0, layouts: Layouts | None = None):
    """``(records, offset after them)`` for each block of whole lines of ``path`` from byte ``offset`` on: dicts, or
    Structs of ``layouts`` (a block they refuse is read as dicts, then turned into Structs)."""
    numbered = offset == 0  # a bad line is named by its number only when the file is read from its start
    with _open(path) as stream:
        stream.seek(offset)
        while True:
            block = stream.read(BLOCK)
            block += b"" if block.endswith(b"\n") else stream.readline()
            whole = block[:block.rfind(b"\n") + 1]  # a last line still being written waits for the next read
            if not whole:
                return
            stream.seek(offset + len(whole))
            rows = layouts.decode(whole) if layouts is not None else None
            if rows is None:
                rows = _records(whole, path, offset if numbered else None)
                rows = layouts.adopt(rows) if layouts is not None else rows
            offset += len(whole)
            yield rows, offset


def _records(block: bytes, path: Path, at: int | None) -> list[dict]:
    """The records of ``block`` (read from byte ``at``, None: not known): decoded at once when each line is a
    quick-checked record, else line by line."""
    try:
        rows = _DECODER.decode_lines(block)  # objects of numbers, strings and nulls only
        events = list(map(itemgetter("event"), rows))
        stops = [_checked(row) for row in rows if row["event"] == "stop"] if "stop" in events else []
        strings = list(map(type, chain.from_iterable(map(dict.values, rows)))).count(str)
        if set(events) <= {"iteration", "epoch", "stop"} and strings == len(rows) + sum(
                isinstance(stop.get("stopped"), str) for stop in stops):  # no string but events and stop reasons
            for key in ("step", "epoch", "iteration"):  # present, integers (not floats, not bools), not negative
                counts = list(map(itemgetter(key), rows))
                if set(map(type, counts)) != {int} or min(counts) < 0:
                    raise ValueError(key)
            return rows
    except (msgspec.MsgspecError, KeyError, ValueError, TypeError, ConfigError):
        pass
    rows = []
    for number, line in enumerate(block.splitlines(), start=1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # undecodable bytes and bad JSON are ValueErrors
            continue
        if isinstance(row, dict):
            try:
                rows.append(_checked(row))
            except ConfigError as error:
                where = f" line {_lines_before(path, at) + number}" if at is not None else ""
                raise SigmaError(f"{path}{where}: not a metrics record ({error})") from None
    return rows


def _lines_before(path: Path, offset: int) -> int:
    """The lines of ``path`` before byte ``offset``: counted only to name a bad line, not on every read."""
    lines = 0
    with _open(path) as stream:
        while offset > 0 and (chunk := stream.read(min(BLOCK, offset))):
            lines, offset = lines + chunk.count(b"\n"), offset - len(chunk)
    return lines


def _checked(row: dict) -> dict:
    """``row`` if it is a :data:`RECORD`, else the ConfigError saying why not."""
    require("", RECORD, {key: value for key, value in row.items() if key != "stopped"}, complete=True)
    require("stopped", "str or null", row.get("stopped"))  # a stop record's reason
    return row


def _in_step_order(records) -> list[dict]:
    """``records`` sorted by step (an epoch record after its step's iteration record), the last of a step logged
    twice (trained again after a resume) kept."""
    latest = {(row["event"], row["step"]): row for row in records}
    return sorted(latest.values(), key=lambda r: (r["step"], r["event"] == "epoch"))


def _last_step(path: Path) -> int:
    """The step of the file's last record, read from its end."""
    with _open(path) as stream:
        size = stream.seek(0, 2)
    for back in (1 << 16, 1 << 20, size):
        with _open(path) as stream:
            stream.seek(max(0, size - back))
            for line in reversed(stream.read().splitlines()[1 if back < size else 0:]):
                step = _step_of(line)
                if step is not None:
                    return step
    return 0


def _offset_of(path: Path, step: float) -> int:
    """The byte offset of a line at or before the first record of step ``step`` or later, by bisection."""
    with _open(path) as stream:
        low, high = 0, stream.seek(0, 2)
    while high - low > BLOCK:
        middle = (low + high) // 2
        if _step_after(path, middle) < step:
            low = middle
        else:
            high = middle
    return _line_start(path, low)


def _step_after(path: Path, offset: int) -> float:
    """The step of the first record starting after byte ``offset`` (at it, for 0); infinite past the last."""
    with _open(path) as stream:
        stream.seek(_line_start(path, offset))
        for line in stream:
            step = _step_of(line)
            if step is not None:
                return step
    return math.inf


def _line_start(path: Path, offset: int) -> int:
    """The offset of the first line that starts at or after byte ``offset``."""
    if offset == 0:
        return 0
    with _open(path) as stream:
        stream.seek(offset - 1)
        stream.readline()
        return stream.tell()


def _open(path: Path):
    try:
        return path.open("rb")
    except OSError as error:
        raise SigmaError(f"{path}: cannot read it ({error.strerror or error}); train with --monitor metrics "
                         "and give the run directory it wrote, e.g. runs/digits") from None


def _step_of(line: bytes) -> int | None:
    try:
        row = json.loads(line)
        return row["step"] if isinstance(row, dict) and isinstance(row.get("step"), int) else None
    except (ValueError, RecursionError):
        return None

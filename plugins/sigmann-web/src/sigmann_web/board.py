"""A board: one run as the dashboard shows it, live or read from its metrics files.

Its chart points are records in the format of the core's ``metrics`` hook
(:func:`sigma_core.record`: ``event``, ``epoch``, ``iteration``,
``step``, ``cost``, ``learning_rate``, ``validation.accuracy``, ...), so a
finished run's ``metrics.jsonl`` and a live run draw the same charts.

A live board is fed by a :class:`~sigmann_web.hook.WebHook` through
``inbox``, a bounded deque the training thread appends to and never waits on
(when full, the oldest entry goes). Everything else happens on the server's
event-loop thread: :meth:`Board.pump` turns the inbox into records, and
:meth:`Board.state` builds what ``GET /api/state`` answers.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

from sigma_core import SigmaError
from sigmann_monitors import read_history, read_new, record, run_label

from . import images

#: Inbox entries a live board holds before the oldest is dropped (a server stalled for a second, at every=1).
INBOX_SIZE = 4096
#: Iteration events turned into chart points per flush (four a second), at most.
PER_FLUSH = 50


class Board:
    """One run's records, facts (``info``), latest values and weight images; see the module docstring."""

    def __init__(self, name: str, info: dict, *, max_points: int = 2000, hook=None, folder=None):
        self.name, self.info, self.hook = name, info, hook
        self.folder = folder  # the run's folder, the only place images are served from (None: not made yet)
        self.max_points = max_points
        self.records: list[dict] = []  # kept for new pages, bounded (see _thin)
        self.pending: list[dict] = []  # records not yet sent to open pages
        self.cleared = False  # a reset emptied the charts since the last broadcast
        self.values: dict = {}  # the latest event's run values (a copy, sigma_core.Values)
        self.weights = None  # {"shape": [h, w], "layer": ..., "tiles": [[-127..127] * h*w, ...]}
        self.weights_changed = False
        self.ended = None  # "finished" or "stopped" once a live run is over
        self.notice = ""  # the last action's outcome, for every open page
        self.inbox = collections.deque(maxlen=INBOX_SIZE)
        self.dropped = 0
        self._rate = collections.deque(maxlen=64)  # (time, step) of recent events, for iterations/s

    @property
    def live(self) -> bool:
        """A run is training (or paused) and takes commands."""
        return self.hook is not None and self.ended is None

    # -- feeding (training thread: append only) --------------------------------------------------
    def post(self, event: str, values: dict, read: dict, extra=None) -> None:
        if len(self.inbox) == INBOX_SIZE:
            self.dropped += 1
        self.inbox.append((event, values, read, extra))

    # -- the server's thread ---------------------------------------------------------------------------
    def pump(self) -> bool:
        """Turn queued events into records; returns whether anything arrived.

        Of a flush's iteration events, at most :data:`PER_FLUSH` evenly spaced
        ones (the last included) become chart points: a fast run costs the
        server, and the training thread it shares the interpreter with, no
        more than a slow one.
        """
        entries = [self.inbox.popleft() for _ in range(len(self.inbox))]
        iterations = [i for i, entry in enumerate(entries) if entry[0] == "iteration"]
        stride = -(-len(iterations) // PER_FLUSH)  # ceiling division
        skipped = set(iterations) - set(iterations[::-1][::stride]) if stride > 1 else set()
        for index, (event, values, read, extra) in enumerate(entries):
            self.values = values
            if index in skipped:
                continue
            self._rate.append((values["time"], values["total_iterations"]))
            if event == "iteration":
                self.add(record("iteration", values, extra=read))
            elif event == "epoch":
                report, scores, weights = extra
                self.add({**record("epoch", values, report, read), **scores})
                self.show_weights(weights)
            elif event == "reset":
                self.records, self.pending, self.cleared = [], [], True
                self._rate.clear()
                self.show_weights(extra)
        return bool(entries)

    def add(self, row: dict) -> None:
        self.records.append(row)
        self.pending.append(row)
        if len(self.records) > self.max_points:
            self._thin()

    def _thin(self) -> None:
        """Halve the older half's iteration records (epoch records stay): recent points keep their detail."""
        half = len(self.records) // 2
        old = [r for i, r in enumerate(self.records[:half]) if r["event"] == "epoch" or i % 2 == 0]
        self.records = old + self.records[half:]

    def history(self, start: float | None, end: float | None) -> list[dict]:
        """The chart points between steps ``start`` and ``end`` (None: unbounded), for a zoomed chart."""
        return [r for r in self.records if (start is None or r["step"] >= start) and (end is None or r["step"] <= end)]

    def show_weights(self, weights) -> None:
        if weights is not None:
            self.weights, self.weights_changed = weights, True

    def take(self) -> dict | None:
        """What changed since the last call, as an ``update`` message body, or None."""
        if not (self.pending or self.cleared or self.weights_changed):
            return None
        update = {"records": self.pending}
        if self.cleared:
            update["reset"] = True
        if self.weights_changed:
            update["weights"] = self.weights
        self.pending, self.cleared, self.weights_changed = [], False, False
        return update

    def state(self) -> dict:
        """The run's state, counters, speed and settings now (``GET /api/state``)."""
        values, info = self.values, self.info
        loop = self.hook.loop if self.hook is not None else None
        state = self.ended or (loop.state.value if loop is not None else "finished")
        epochs = loop.epochs if loop is not None else info.get("epochs")
        per_epoch = info.get("iterations_per_epoch") or 0
        step, epoch = values.get("total_iterations", 0), values.get("epoch", 0)
        iteration = values.get("iteration", 0)
        rate = self._iterations_per_s() if state == "running" else None
        remaining = max(((epochs or 0) - epoch) * per_epoch - (iteration % per_epoch if per_epoch else 0), 0)
        latest = next((r for r in reversed(self.records) if r["event"] == "epoch"), {})
        settings = self.hook.settings() if self.live else {}
        return {
            "run": self.name, "live": self.live, "state": state, "epoch": epoch, "epochs": epochs,
            "iteration": iteration, "iterations_per_epoch": per_epoch, "step": step,
            "runtime": values.get("runtime"), "cost": _finite(values.get("cost")),
            "learning_rate": settings.get("optimiser.learning_rate", values.get("learning_rate")),
            "iterations_per_s": rate, "eta_s": remaining / rate if rate else None,
            "latest_epoch": {k: v for k, v in latest.items() if k not in ("time", "event")},
            "settings": settings,
            "notice": self.notice, "dropped": self.dropped, "images": images.listing(values, self.folder),
        }

    def image(self, name) -> Path:
        """The file of the image the run publishes as the value ``name`` (:mod:`sigmann_web.images`): LookupError
        if it publishes none by that name (or the file is not there), ValueError if it is outside the run's folder."""
        shown = images.published(self.values)
        if name not in shown:
            raise LookupError(f"run {self.name!r} publishes no image {name!r} (images: {', '.join(shown) or 'none'})")
        return images.image_file(self.folder, shown[name])

    def _iterations_per_s(self) -> float | None:
        samples = [s for s in self._rate if s[0] >= self._rate[-1][0] - 10] if self._rate else []
        if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
            return None
        return (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])

    def snapshot(self) -> dict:
        """Everything a page needs to draw this run from scratch."""
        return {"run": self.name, "info": self.info, "state": self.state(), "records": self.records,
                "weights": self.weights}


def _finite(value):
    return value if isinstance(value, (int, float)) and value == value else None


def board_from_files(directory) -> Board:
    """A read-only board of a run from the ``metrics.jsonl`` in ``directory`` (or that file): its history
    downsampled (:func:`sigmann_monitors.read_history`), followed as the file grows (:meth:`FileBoard.pump`).

    Its ``stop`` record (the last, if it was resumed) says how it ended: ``stopped`` with the epochs done of those
    planned and what stopped it, or ``finished``; a run without one (it crashed, is still training, or predates
    them) shows as ended.
    """
    history = read_history(directory)
    board = FileBoard(history.path)
    board.take_in(history)
    return board


class FileBoard(Board):
    """A board read from a metrics file: its chart points are the file's history downsampled, and what the file
    gains (the run may still be training) is read from where the last read ended, four times a second."""

    def __init__(self, path):
        super().__init__(run_label(path), {})
        self.path, self.offset = path, 0
        self.epochs_done, self.per_epoch, self.planned, self.stop = 0, 0, 0, None

    def take_in(self, history) -> None:
        """Start over from ``history`` (:class:`sigmann_monitors.History`): the file read from its start."""
        self.records, self.offset = history.records, history.offset
        self.max_points = max(2000, 2 * len(self.records))
        self.epochs_done, self.per_epoch, self.stop = history.epochs, history.iterations_per_epoch, history.stop
        self.planned = history.last["epoch"] if history.last else 0  # records lie in step order
        self._ended(history.last)

    def pump(self) -> bool:
        """Take in the records the file gained since the last read (all of it again if it was rewritten)."""
        try:
            size = self.path.stat().st_size
            if size < self.offset:  # rewritten (a resumed run drops the records past its step): read it again
                self.take_in(read_history(self.path))
                self.pending, self.cleared = list(self.records), True
                return True
            rows, self.offset = read_new(self.path, self.offset) if size > self.offset else ([], self.offset)
        except (OSError, SigmaError):  # gone or broken since: it keeps showing what it had
            return False
        last = None
        for row in rows:
            if row["event"] == "stop":
                self.stop = row
                continue
            self.epochs_done += row["event"] == "epoch"
            if row["event"] == "epoch":
                self.per_epoch = max(self.per_epoch, row["iteration"])
            self.planned, last = max(self.planned, row["epoch"]), row
            self.add(row)
        if rows:
            self._ended(last)
        return bool(rows)

    def history(self, start, end) -> list[dict]:
        """The file's records between steps ``start`` and ``end``, downsampled: a zoomed chart gets their detail."""
        return read_history(self.path, start, end).records

    def _ended(self, last) -> None:
        """The run's facts and how it ended, from its stop record and its ``last`` record (if any)."""
        stop = self.stop
        done = stop["epoch"] if stop else self.epochs_done
        planned = stop.get("epochs", done) if stop else self.planned
        ended = "ended" if stop is None else "stopped" if stop.get("stopped") or done < planned else "finished"
        if ended == "stopped":
            said = f"stopped at epoch {done} of {planned}" + (f" by {stop['stopped']}" if stop["stopped"] else "")
        else:
            said = f"{ended} after {done} of {planned} epochs"
        self.info = {"run": self.name, "source": str(self.path), "epochs": planned,
                     "iterations_per_epoch": self.per_epoch, "ended": said}
        last = last or stop
        if last is not None:
            self.values = {"time": last.get("time", time.time()), "epoch": done, "total_iterations": last["step"],
                           "iteration": last["iteration"], "optimiser.cost_total": last.get("cost"),
                           "optimiser.learning_rate": last.get("learning_rate")}
        self.ended = ended

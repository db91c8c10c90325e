"""The ``tensorboard`` hook: a run as TensorBoard event files, written with tensorboardX.

Into ``directory`` (default the run's own directory, ``run.directory``:
``runs/<run name>/version_N``, beside the ``metrics``
hook's files), on the hook's own thread:

- scalars named ``<event>/<name>`` after the ``metrics`` hook's records
  (:func:`sigma_core.record`): ``iteration/cost`` and
  ``iteration/learning_rate`` every ``every`` iterations, at step = iterations
  trained; ``epoch/cost``, ``epoch/validation.accuracy``,
  ``epoch/validation.cost``, ``epoch/learning_rate``,
  ``epoch/iterations_per_s`` and ``epoch/seconds`` after each epoch, at
  step = the epoch (as the progress lines number them);
- after each epoch, histograms of the parameters that ``histograms`` matches
  under ``network.layers`` (``weights/<layer>.<param>``, biases included with
  the default ``"*.*"``; ``""``: none) and of their updates
  (``updates/<layer>.<param>``). ``updates = "epoch"`` (the default): each
  parameter's change over the epoch, which costs training nothing.
  ``updates = "step"``: the optimiser's published update of the epoch's last
  step, which needs ``optimiser.publish_updates`` on, a copy per parameter
  per step (a third slower on a small, fast network). ``""``: none;
- the run's config, as text (``config``);
- when the run ends, its hyperparameters (every scalar setting of the run
  file) with its final epoch's metrics (``final/<name>``) for the HParams
  tab, in the same event file as the scalars: TensorBoard then lists one run
  whose HParams row and charts belong together (tensorboardX's ``add_hparams``
  would make a run of its own, ``<run>/<time>``, beside it).

Each run writes its own directory (``tensorboard --logdir runs/<name>`` shows
its versions side by side); a resumed run adds an event file to its
checkpoint's run directory, and TensorBoard shows one run. First it purges
what it is about to train again from the event files there (what
tensorboardX's ``purge_step`` asks TensorBoard to do, done in the files, so
that every reader agrees), on both scales: iteration scalars past the
checkpoint's step, epoch scalars and histograms past its epochs (:func:`purge`).

The files are written on the hook's thread (:class:`EventFile`), each epoch
flushed to disk: a disk that fills up or goes away is one line naming the
hook, which is detached while training goes on.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

from sigma_core import Hook, HookError, atomic_write, check_writable
from sigmann_monitors import MetricsHook, record


class TensorBoardHook(Hook):
    """Writes scalars, histograms, the config and HParams for TensorBoard; see the module docstring."""

    name = "tensorboard"
    threaded = True
    argument_rules = {"every": "int >= 0"}  # checked when built from a run file or --monitor

    def __init__(self, directory: str | None = None, every: int = 10, histograms: str = "*.*",
                 updates: str = "epoch"):
        if updates not in ("epoch", "step", ""):
            raise HookError(f"tensorboard: updates must be \"epoch\", \"step\" or \"\", got {updates!r}")
        self.directory, self.every, self.updates = directory, every, updates if histograms else ""
        self.histograms = (f"network.layers.{histograms}",) if histograms else ()
        steps = (f"optimiser.updates.{histograms}",) if self.updates == "step" else ()
        self.reads = {"on_iteration": ("cost",), "on_epoch": self.histograms + steps}
        if self.updates == "epoch":  # the weights an epoch starts from
            self.reads.update(on_start=self.histograms, on_reset=self.histograms)
        self.writer = None
        self.final: dict = {}
        self._previous: dict = {}  # parameter -> its weights at the end of the last epoch

    def attach(self, run):  # on the training thread, before the first step
        from tensorboardX import summary  # imported here, not while the first epoch trains
        from tensorboardX.proto.summary_pb2 import Summary

        super().attach(run)
        if self.updates == "step":
            run.optimiser.publish_updates = True
        self.directory = Path(self.directory) if self.directory else run.directory
        self.optimiser_type = type(run.optimiser).__name__
        self._summary, self._Summary = summary, Summary

    def on_start(self):
        self.on_reset()
        values = self.run.values
        if values["total_iterations"] and self.directory.is_dir():  # resumed: what it trains again goes
            purge(self.directory, values["total_iterations"], values["epoch"])
        self.writer = EventFile(self.directory)
        if self.run.config is not None:  # indented: a code block in TensorBoard's markdown
            text = json.dumps(self.run.config, indent=2, default=str)
            self.writer.add(self._summary.text("config", "    " + text.replace("\n", "\n    ")),
                            self.run.values["total_iterations"])

    def on_iteration(self):
        values = self.run.values
        self._scalars(record("iteration", values), values["total_iterations"])

    def on_reset(self):
        self._previous = {key.split(".", 2)[2]: array for key, array in self.run.values.matching(self.histograms).items()}

    def on_epoch(self, report):
        values, histogram = self.run.values, self._summary.histogram
        self.final = record("epoch", values, report)
        self._scalars(self.final, report.epoch)
        arrays = values.matching(self.reads["on_epoch"])
        for key, array in arrays.items():  # network.layers.<layer>.<param>, optimiser.updates.<layer>.<param>
            section, _, parameter = key.split(".", 2)
            if section == "optimiser":
                self.writer.add(histogram(f"updates/{parameter}", array, BINS), report.epoch)
                continue
            self.writer.add(histogram(f"weights/{parameter}", array, BINS), report.epoch)
            if self.updates == "epoch" and parameter in self._previous:
                self.writer.add(histogram(f"updates/{parameter}", array - self._previous[parameter], BINS),
                                report.epoch)
            self._previous[parameter] = array
        self.writer.flush()  # TensorBoard shows the epoch now; a full disk says so now

    def on_stop(self):
        metrics = {f"final/{name}": value for name, value in self.final.items() if name not in MetricsHook.HEADER}
        if metrics:
            hparams = dict(_settings(self.run.config or {}))
            hparams.setdefault("optimiser.type", self.optimiser_type)
            for part in self._summary.hparams(hparams, metrics):  # experiment, session start, session end
                self.writer.add(part)
            for name, value in metrics.items():  # the metrics the HParams tab shows, read from this run's scalars
                self.writer.add(self._summary.scalar(name, value), self.final["epoch"])
            self.writer.flush()

    def _scalars(self, row: dict, step: int):
        """The record's values as one ``Summary`` (what tensorboardX's ``scalar`` makes of each, a tenth of the
        time: an iteration's scalars are most of what this hook writes)."""
        scalars = [self._Summary.Value(tag=f"{row['event']}/{name}", simple_value=value)
                   for name, value in row.items() if name not in MetricsHook.HEADER]
        self.writer.add(self._Summary(value=scalars), step)

    def detach(self):
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close()


class EventFile:
    """A TensorBoard event file in ``directory`` (made if missing), written on the calling thread.

    tensorboardX's ``SummaryWriter`` hands every event to a thread of its own,
    where an error (a full disk) is a traceback no caller can catch, after
    which every later event waits for the dead thread's queue. The hook has a
    thread of its own already, so it writes here, through tensorboardX's
    record writer, where an ``OSError`` reaches the hook's caller: one line,
    and the hook is detached.
    """

    def __init__(self, directory: Path):
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.record_writer import RecordWriter

        check_writable(directory, folder=True, what="tensorboard directory")  # a file there, no permission: one line
        earlier = len(list(directory.glob(f"{EVENT_FILES}*")))  # a resumed run's may start within the same second
        name = f"{EVENT_FILES}{int(time.time())}.{socket.gethostname()}.{earlier}"  # as tensorboardX names them
        self._Event, self._records = Event, RecordWriter(str(directory / name))
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, summary, step: int | None = None) -> None:
        """Append ``summary`` (a tensorboardX ``Summary``) at ``step``, stamped with the time now."""
        event = self._Event(summary=summary, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self._write(event)

    def _write(self, event) -> None:
        self._records.write(event.SerializeToString())

    def flush(self) -> None:
        """Write what is buffered through to the disk (``fsync``)."""
        self._records.flush()

    def close(self) -> None:
        """Flush and close; the file is closed even when the flush fails (a full disk)."""
        try:
            self._records.flush()
        finally:
            self._records.close()


#: How event files' names start (TensorBoard reads the files whose names hold ``tfevents``).
EVENT_FILES = "events.out.tfevents."


def purge(directory: Path, step: int, epochs: int) -> None:
    """Drop from the event files in ``directory`` the events a run resumed at training ``step`` and ``epochs`` done
    trains again: iteration scalars (and the config) past ``step``, any other summary past ``epochs``.

    The files are TFRecords (a little-endian 8-byte length, its checksum, the event, the event's checksum); the
    records kept are copied as they are, so no checksum is computed again. A file that changes is rewritten
    atomically.
    """
    from tensorboardX.proto.event_pb2 import Event

    for path in sorted(directory.glob(f"{EVENT_FILES}*")):
        data, kept, at = path.read_bytes(), [], 0
        while at + 12 <= len(data):
            end = at + 12 + struct.unpack_from("<Q", data, at)[0] + 4
            event = Event.FromString(data[at + 12:end - 4])
            by_step = any(value.tag.startswith(("iteration/", "config")) for value in event.summary.value)
            if not event.HasField("summary") or event.step <= (step if by_step else epochs):
                kept.append(data[at:end])
            at = end
        if sum(map(len, kept)) < len(data):
            with atomic_write(path, what="tensorboard event file") as stream:
                stream.write(b"".join(kept))


def _tensorflow_bins() -> list[float]:
    """TensorBoard's usual histogram buckets (those of tensorboardX's ``bins="tensorflow"``): ±1e-12, growing by
    10 % up to 1e20, and 0."""
    limits, limit = [], 1e-12
    while limit < 1e20:
        limits.append(limit)
        limit *= 1.1
    return [-limit for limit in reversed(limits)] + [0.0] + limits


BINS = _tensorflow_bins()


def _settings(table: dict, prefix: str = ""):
    """The scalar settings of a run config as dotted keys (lists, such as the layers, are left out)."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _settings(value, f"{prefix}{key}.")
        elif isinstance(value, (bool, int, float, str)):
            yield f"{prefix}{key}", value

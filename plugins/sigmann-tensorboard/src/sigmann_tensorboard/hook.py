"""The ``tensorboard`` hook: a run as TensorBoard event files, written with tensorboardX.

Into ``directory`` (default ``runs/<run name>``, beside the ``metrics``
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
  tab, in the subdirectory ``hparams``.

A resumed run adds an event file to the same directory; TensorBoard shows one run.
"""

from __future__ import annotations

import json
from pathlib import Path

from sigma_core import Hook, HookError, MetricsHook, record


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
        from tensorboardX import SummaryWriter  # imported here, not while the first epoch trains

        super().attach(run)
        if self.updates == "step":
            run.optimiser.publish_updates = True
        self.directory = Path(self.directory or Path("runs") / run.name)
        self.optimiser_type = type(run.optimiser).__name__
        self._writer_class = SummaryWriter

    def on_start(self):
        self.on_reset()
        # Made here, race-free: tensorboardX checks, then creates, and the metrics hook's thread may win between.
        self.directory.mkdir(parents=True, exist_ok=True)
        self.writer = self._writer_class(str(self.directory))
        if self.run.config is not None:  # indented: a code block in TensorBoard's markdown
            text = json.dumps(self.run.config, indent=2, default=str)
            self.writer.add_text("config", "    " + text.replace("\n", "\n    "), self.run.values["total_iterations"])

    def on_iteration(self):
        values = self.run.values
        self._scalars(record("iteration", values), values["total_iterations"])

    def on_reset(self):
        self._previous = {key.split(".", 2)[2]: array for key, array in self.run.values.matching(self.histograms).items()}

    def on_epoch(self, report):
        values = self.run.values
        self.final = record("epoch", values, report)
        self._scalars(self.final, report.epoch)
        arrays = values.matching(self.reads["on_epoch"])
        for key, array in arrays.items():  # network.layers.<layer>.<param>, optimiser.updates.<layer>.<param>
            section, _, parameter = key.split(".", 2)
            if section == "optimiser":
                self.writer.add_histogram(f"updates/{parameter}", array, report.epoch)
                continue
            self.writer.add_histogram(f"weights/{parameter}", array, report.epoch)
            if self.updates == "epoch" and parameter in self._previous:
                self.writer.add_histogram(f"updates/{parameter}", array - self._previous[parameter], report.epoch)
            self._previous[parameter] = array

    def on_stop(self):
        metrics = {f"final/{name}": value for name, value in self.final.items() if name not in MetricsHook.HEADER}
        if metrics:
            hparams = dict(_settings(self.run.config or {}))
            hparams.setdefault("optimiser.type", self.optimiser_type)
            self.writer.add_hparams(hparams, metrics, name="hparams", global_step=self.final["epoch"])

    def _scalars(self, row: dict, step: int):
        for name, value in row.items():
            if name not in MetricsHook.HEADER:
                self.writer.add_scalar(f"{row['event']}/{name}", value, step)

    def detach(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _settings(table: dict, prefix: str = ""):
    """The scalar settings of a run config as dotted keys (lists, such as the layers, are left out)."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _settings(value, f"{prefix}{key}.")
        elif isinstance(value, (bool, int, float, str)):
            yield f"{prefix}{key}", value

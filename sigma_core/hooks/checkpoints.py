"""The ``checkpoint`` hook: the one way a run writes checkpoints (:mod:`sigma_core.training.checkpoint`) as it trains.

A run file's ``[checkpoint]`` section becomes these hooks; a ``[[hooks]]`` table adds more
(``{ type = "checkpoint", best = "validation.accuracy" }`` keeps the best epochs so far).
:func:`checkpoint_now` saves one on demand (Ctrl-C, the web page's Stop & save, the end of ``sigma train``).
"""

from pathlib import Path

from sigma_core.training.checkpoint import checkpoint_path, checkpoints, save_checkpoint
from sigma_core.config import require
from sigma_core.hooks.base import Hook, schedule
from sigma_core.hooks.values import Best


class CheckpointHook(Hook):
    """Saves a checkpoint ``every`` n epochs (``[n, "epoch"]``, the default) or n iterations (``n``), keeping the
    newest ``keep`` in ``directory``; with ``best``, a run value's name (``"validation.accuracy"``), only when that
    value reaches a new best (``mode`` ``"max"`` or ``"min"``)."""

    name = "checkpoint"
    order = 50  # after the hooks that publish what `best` reads, before the stoppers

    def __init__(self, directory: str = "checkpoints", *, keep: int = 3, every=(1, "epoch"), best: str | None = None,
                 mode: str = "max"):
        require("checkpoint: keep", "int >= 1", keep)
        self.directory, self.keep, self.every = Path(directory), keep, every
        self.best = None if best is None else Best(best, mode, "checkpoint")
        self.per_epoch = schedule(self)[0] == 0

    def on_epoch(self, report=None):
        """Save at a due iteration, or epoch if it saves per epoch, unless ``best`` judges it no better."""
        if (report is None or self.per_epoch) and (self.best is None or self.best.update(self.run.values)):
            self.save(self.run.trainer)

    on_iteration = on_epoch

    def save(self, trainer) -> Path:
        """Save now, then delete all but the newest ``keep`` checkpoints of this trainer."""
        config = self.run.config if self.run else None
        path = save_checkpoint(trainer, config, checkpoint_path(self.directory, trainer),
                               directory=self.run.directory if self.run and self.run.loop.has_directory else None)
        for old in checkpoints(self.directory, trainer.name)[:-self.keep]:
            old.unlink(missing_ok=True)
        return path


def checkpoint_now(loop) -> Path:
    """Save the run of ``loop`` now (on its training thread, or once it has ended) where its first checkpoint
    hook saves, else into ``checkpoints/`` in the run's own directory; returns the path."""
    saver = next((hook for hook in loop.hooks if isinstance(hook, CheckpointHook)), None)
    if saver is not None:
        return saver.save(loop.trainer)
    trainer = loop.trainer
    return save_checkpoint(trainer, loop.config, checkpoint_path(loop.directory / "checkpoints", trainer),
                           directory=loop.directory)


def checkpoint_hooks_from_config(config: dict) -> list[CheckpointHook]:
    """The hooks a run file's ``[checkpoint]`` section asks for: one per time scale set (none when off)."""
    section = config["checkpoint"]
    iterations, epochs = section["every_iterations"], section["every_epochs"]
    everies = [every for every, on in ((iterations, iterations), ([epochs, "epoch"], epochs)) if on]
    return [CheckpointHook(section["directory"], keep=section["keep"], every=every) for every in everies]

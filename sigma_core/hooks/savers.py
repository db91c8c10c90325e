"""Savers: the one way a run writes checkpoints (:mod:`sigma_core.checkpoint`), as hooks.

A run file's ``[checkpoint]`` section becomes these hooks, and a ``[[hooks]]``
table adds more: ``{ type = "checkpoint", on = { extrema =
"shared.validation.accuracy_top1", mode = "max" } }`` keeps the best epochs so
far (with an ``accuracy_scorer`` writing the score). Time steps count from the
start of this run (after a resume, from the resume point).
"""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import checkpoint_path, checkpoints, save_checkpoint
from ..errors import ConfigError
from . import timestep
from .base import Hook


class CheckpointHook(Hook):
    """Saves a checkpoint whenever it fires (:func:`~sigma_core.checkpoint.checkpoint_path` names it),
    keeping the newest ``keep`` in ``directory``."""

    default_target = "global"
    default_priority = 5000  # after scorers (a criterion sees the fresh score) and modifiers, before stoppers

    def __init__(self, directory: str = "checkpoints", *, keep: int = 3, every=None):
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ConfigError(f"checkpoint: keep must be an integer >= 1, got {keep!r}")
        super().__init__(every or timestep.every(1, "epoch"), parameters={"directory": str(directory), "keep": keep},
                         requires=("trainer.self",))
        self.directory = Path(directory)
        self.keep = keep

    def invoke(self, registry, resolver):
        self.save(registry["trainer"]["self"])

    def save(self, trainer) -> Path:
        """Save now, then delete all but the newest ``keep`` checkpoints of this trainer."""
        path = save_checkpoint(trainer, trainer.run_config, checkpoint_path(self.directory, trainer))
        for old in checkpoints(self.directory, trainer.name)[:-self.keep]:
            old.unlink(missing_ok=True)
        return path


def checkpoint_hooks_from_config(config: dict) -> list[Hook]:
    """The hooks a run file's ``[checkpoint]`` section asks for: one per time scale set (none when off)."""
    section = config["checkpoint"]
    return [CheckpointHook(section["directory"], keep=section["keep"], every=timestep.every(interval, scale))
            for scale, interval in (("iteration", section["every_iterations"]), ("epoch", section["every_epochs"]))
            if interval]

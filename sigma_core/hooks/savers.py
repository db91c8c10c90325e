"""Saviors: write checkpoints from inside training, on a time step or a criterion.

``{ type = "checkpoint", every = [1, "epoch"], on = { extrema =
"shared.validation.accuracy_top1", mode = "max" } }`` keeps the checkpoints
of the best epochs so far (with an ``accuracy_scorer`` attached to write the
score). The files are those of :mod:`sigma_core.checkpoint`: atomic, checksummed,
and resumable with ``sigma train --resume``.
"""

from __future__ import annotations

from ..checkpoint import CheckpointSaver
from ..errors import ConfigError
from . import timestep
from .base import Hook


class CheckpointHook(Hook):
    """Saves a checkpoint whenever it fires, keeping the newest ``keep`` files in ``directory``."""

    default_target = "global"
    default_priority = 5000  # after scorers (a criterion sees the fresh score), before stoppers

    def __init__(self, directory: str = "checkpoints", *, keep: int = 3, every=None):
        if not isinstance(keep, int) or keep < 1:
            raise ConfigError(f"checkpoint: keep must be an integer >= 1, got {keep!r}")
        super().__init__(every or timestep.every(1, "epoch"), parameters={"directory": str(directory), "keep": keep},
                         requires=("trainer.self",))
        self._saver = CheckpointSaver(directory, keep=keep)

    def invoke(self, registry, resolver):
        trainer = registry["trainer"]["self"]
        self._saver.config = getattr(trainer, "run_config", None)
        self._saver.save(trainer)

"""Replayed steps over a long run: memory stays flat (issue 24), and a warm step still allocates nothing.

Replayed steps run without a buffer session. Before, the held-out evaluation's arrays (made between steps) went
into the last session's list, which only a session's start empties: with replay on, every epoch kept them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from sigmann_replay import StepReplay
from sigmann_testing import ArrayCensus, Prober

from sigma_core import CheckpointHook, Hook, Loop, build_run
from sigma_core import config as run_config
from sigmann_monitors import MetricsHook

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits.toml"


class Allocations(Hook):
    """The handler's session allocations after every epoch."""

    def __init__(self):
        self.counts = []

    def on_epoch(self, report):
        self.counts.append(self.run.trainer.handler.allocations)


@pytest.mark.parametrize("handler", ["numpy", "cpu"])
def test_replayed_runs_keep_no_arrays_from_epoch_to_epoch(handler, tmp_path):
    raw = tomllib.loads(DIGITS.read_text())
    raw["handler"]["name"] = handler
    raw["training"].update(epochs=6, compile="replay")
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    census, allocations = ArrayCensus(), Allocations()
    hooks = [MetricsHook(directory=str(tmp_path / "metrics")), CheckpointHook(str(tmp_path / "checkpoints")),
             Prober(next(iter(run.trainer.validation["validation"]))["inputs"][:5]), allocations, census]
    Loop(run.trainer, epochs=6, hooks=hooks).run()
    assert StepReplay.of(run.trainer).replayed > 5 * 40
    census.assert_flat()
    assert allocations.counts[1:] == allocations.counts[:1] * 5  # replayed steps allocate nothing

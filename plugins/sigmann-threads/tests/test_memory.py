"""The threads operator over a long run: no handler arrays pile up from epoch to epoch (issue 24), on the trainer's
handler or the workers'."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from sigmann_testing import ArrayCensus, Prober

from sigma_core import CheckpointHook, Loop, build_run
from sigma_core import config as run_config
from sigmann_monitors import MetricsHook
from sigmann_threads import ThreadsOperator

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits.toml"


@pytest.mark.parametrize("handler", ["numpy", "cpu"])
def test_thread_workers_keep_no_arrays_from_epoch_to_epoch(handler, tmp_path):
    raw = tomllib.loads(DIGITS.read_text())
    raw["handler"]["name"] = handler
    raw["training"].update(epochs=6, compile="replay")  # what a run file asks for; the workers' steps are their own
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    census = ArrayCensus()
    hooks = [MetricsHook(directory=str(tmp_path / "metrics")), CheckpointHook(str(tmp_path / "checkpoints")),
             Prober(next(iter(run.trainer.validation["validation"]))["inputs"][:5]), census]
    Loop(run.trainer, ThreadsOperator(run.trainer, workers=2), epochs=6, hooks=hooks).run()
    census.assert_flat()

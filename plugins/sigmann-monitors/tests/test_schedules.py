"""Learning-rate schedules across a resume: the rate goes on as if the run was never interrupted."""

from __future__ import annotations

import pytest

from sigma_core import build_run, load_run_file


@pytest.mark.parametrize("schedule", [
    'type = "exponential_schedule"\ngamma = 0.5\nper = "epoch"\n',
    'type = "cosine_schedule"\nperiod = 1000\nper = "iteration"\n',  # never at its end: every step moves it
])
def test_a_resumed_run_schedules_from_the_run_files_rate_not_the_scheduled_one(run_file, tmp_path, schedule):
    saves = tmp_path / "saves"
    with open(run_file, "a") as stream:
        stream.write(f'[[hooks]]\n{schedule}[[hooks]]\ntype = "checkpoint"\ndirectory = "{saves}"\n')

    def trained(epochs, checkpoint=None):
        run = build_run(load_run_file(run_file, [f"training.epochs={epochs}"]))
        if checkpoint is not None:
            run.resume(checkpoint)
        run.train()
        return run.trainer.optimiser.learning_rate

    whole = trained(4)
    first = trained(2)
    assert first != whole  # the schedule moved the rate: a resume that restarted it would show
    latest = max(saves.rglob("*.ckpt"), key=lambda path: path.stat().st_mtime_ns)
    assert trained(4, latest) == pytest.approx(whole, rel=1e-12)

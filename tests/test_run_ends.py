"""How a run ends: ``sigma train`` saves a checkpoint and says in one line what ended it, where it saved and the
exact command to resume, with an exit status per cause (Ctrl-C: tests/test_state_training.py; the web page:
plugins/sigmann-web/tests/test_web_stop.py)."""

from __future__ import annotations

import json
import shlex

import pytest

from sigma_core import Hook, load_checkpoint
from sigma_core.cli import main
from sigma_core.errors import SigmaError
from sigma_core.training.loop import Loop, Stop


def ending(capsys, *argv) -> tuple[int, list[str]]:
    status = main(["train", *argv, "--quiet"])
    return status, [line for line in capsys.readouterr().err.splitlines() if not line.startswith("sigma: ")]


def test_a_finished_run_says_where_it_saved_and_how_to_train_on(run_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, [line] = ending(capsys, str(run_file), "--set", "seed=3", "--out", "result.json")
    saved = "runs/blobs/version_0/checkpoints/blobs-e2-i0.ckpt"
    command = shlex.join(["sigma", "train", str(run_file), "--set=seed=3", "--set=training.epochs=4", "--resume", saved])
    assert (status, line) == (0, f"finished after training step 18 (2 of 2 epochs done); saved {saved}; "
                                 f"train on with: {command}")
    assert load_checkpoint(saved).metadata["directory"] == str(tmp_path / "runs" / "blobs" / "version_0")
    assert json.loads((tmp_path / "result.json").read_text())["stopped"] is None
    status, _ = ending(capsys, *shlex.split(line.split("train on with: ")[1])[2:])  # the command works as printed
    assert status == 0 and [p.name for p in (tmp_path / "runs" / "blobs").iterdir()] == ["version_0"]
    status, [line] = ending(capsys, str(run_file), "--resume", "last", "--set", "training.epochs=5")  # the newest
    assert status == 0 and line.startswith("finished after training step 45 (5 of 5 epochs done); saved "
                                           "runs/blobs/version_0/checkpoints/blobs-e5-i0.ckpt;")
    assert line.count("training.epochs") == 1 and "--set=training.epochs=10 --resume" in line  # said once


def test_a_criterion_that_stops_the_run_is_named_and_the_exit_status_is_0(run_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_file.write_text(run_file.read_text().replace("epochs = 2", "epochs = 10") +
                        '[[hooks]]\ntype = "early_stopping"\nvalue = "epoch"\nmode = "min"\npatience = 2\n')
    status, [line] = ending(capsys, str(run_file))
    saved = "runs/blobs/version_0/checkpoints/blobs-e3-i0.ckpt"  # epoch 1 is the best "epoch": 2 and 3 miss
    assert (status, line) == (0, "stopped by early stopping (epoch has not improved on 1 for 2 checks) after training "
                                 f"step 27 (3 of 10 epochs done); saved {saved}; resume with: "
                                 f"{shlex.join(['sigma', 'train', str(run_file), '--resume', saved])}")


def test_a_stop_command_carries_its_reason_and_status_and_refuses_others(run_file):
    from sigma_core import config as run_config
    from sigma_core.run import build_run

    class Stopper(Hook):
        def on_iteration(self):
            if self.run.values["total_iterations"] == 3:
                self.run.command("stop", reason="a test", status=7)
                self.run.command("stop", reason="a second stop")  # ignored: the first stop says why

    run = build_run(run_config.load(run_file, []))
    run.trainer.initialise(run.handler)
    loop = Loop(run.trainer, epochs=2, hooks=[Stopper()])
    loop.run()
    assert (loop.stopped, run.trainer.total_iterations) == (Stop("a test", 7), 3)
    with pytest.raises(SigmaError, match=r"stop: status: expected an integer in \[0, 255\], got 300"):
        loop.command("stop", status=300)
    with pytest.raises(SigmaError, match="unknown command 'stop' with arguments"):
        loop.command("stop", why="typo")

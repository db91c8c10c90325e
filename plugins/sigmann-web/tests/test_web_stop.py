"""Stops the page makes and the dashboard shows: ``sigma train`` ends in one line with exit status 3, the page is
told the real resume command, and a stopped run reads back as stopped, with its epochs done of those planned."""

from __future__ import annotations

import shlex
import subprocess
import sys

import httpx

from sigma_core import load_checkpoint
from sigma_core.cli import main
from sigmann_monitors import run_directories
from sigmann_web.board import board_from_files
from sigmann_web.hook import STOPPED_FROM_PAGE


def test_stop_and_save_from_the_page_ends_sigma_train_with_status_3_and_the_real_resume_command(run_file, tmp_path):
    path = run_file(epochs=100000)
    training = subprocess.Popen([sys.executable, "-c", "from sigma_core.cli import main; raise SystemExit(main())",
                                 "train", str(path), "--quiet", "--monitor", "web", "--monitor", "metrics"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = next(line for line in training.stderr if line.startswith("sigma web: ")).split(" at ")[1].split()[0]
        base, token = url.split("?token=")
        refused = httpx.post(base + "api/control", json={"action": "stop", "save": True}, timeout=20)
        assert refused.status_code == 403  # no token, no stop
        answer = httpx.post(base + "api/control", json={"action": "stop", "save": True}, timeout=20,
                            headers={"X-Sigma-Token": token}).json()
        out, err = training.communicate(timeout=60)
    finally:
        training.kill()
    assert training.returncode == STOPPED_FROM_PAGE == 3, err
    saved = answer["message"].split("saved ")[1].split(";")[0]
    command = shlex.join(["sigma", "train", str(path), "--resume", saved])
    assert answer["message"] == f"stopped; saved {saved}; resume with: {command}"  # the run file, not RUN.toml
    assert saved.startswith("runs/blobs/version_0/checkpoints/blobs-e")
    state = load_checkpoint(tmp_path / saved).trainer
    [line] = [line for line in err.splitlines() if not line.startswith("sigma")]
    where = (f"epoch {state['epoch'] + 1} of 100000, iteration {state['iteration']}" if state["in_epoch"]
             else f"{state['epoch']} of 100000 epochs done")
    assert line == (f"stopped by the web page's Stop & save after training step {state['total_iterations']} "
                    f"({where}); saved {saved}; resume with: {command}")
    [board] = [board_from_files(run) for run in run_directories(tmp_path / "runs" / "blobs")]
    assert (board.name, board.ended, board.state()["epochs"]) == ("blobs/version_0", "stopped", 100000)
    assert board.info["ended"].endswith("of 100000 by the web page's Stop & save")


def test_the_dashboard_shows_a_run_a_criterion_stopped_as_stopped_at_its_epoch_of_those_planned(run_file, tmp_path,
                                                                                                capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = run_file(epochs=30)
    path.write_text(path.read_text() + "[[hooks]]\ntype = \"stop\"\nat_epoch = 24\n")
    for _ in range(2):  # two runs of one run file: two versions, two tabs
        assert main(["train", str(path), "--quiet", "--monitor", "metrics:every=0"]) == 0  # a criterion: status 0
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("sigma: ")]
    assert lines[0].startswith("stopped by hook 'stop' (at_epoch = 24) after training step 960 (24 of 30 epochs done); "
                               "saved runs/blobs/version_0/checkpoints/blobs-e24-i0.ckpt; resume with: sigma train ")
    boards = [board_from_files(run) for run in run_directories(tmp_path / "runs" / "blobs")]
    assert [board.name for board in boards] == ["blobs/version_0", "blobs/version_1"]
    state = boards[0].state()
    assert (state["state"], state["epoch"], state["epochs"]) == ("stopped", 24, 30)  # not "finished, 24/24"
    assert boards[0].info["ended"] == "stopped at epoch 24 of 30 by hook 'stop' (at_epoch = 24)"
    assert [r["epoch"] for r in boards[1].records if r["event"] == "epoch"] == list(range(1, 25))

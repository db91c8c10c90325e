"""``sigma train`` under faults (issue 10, items 8 and 15): locks, leftovers, unwritable paths, full disks,
overflow, Ctrl-C. Every failure is one line; the last good checkpoint always survives."""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from sigma_core.atomic import PARTIAL, remove_stale
from sigma_core.training.checkpoint import checkpoints, latest_checkpoint, load_checkpoint, run_lock
from sigma_core.cli import main
from sigma_core.training.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent

RUN = """
name = "run"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = {records}
shape = [16]
classes = 4
[split]
validation = 0.25
[[network.layers]]
type = "input"
shape = [16]
[[network.layers]]
type = "dense"
size = 32
activation = "relu"
[[network.layers]]
type = "dense"
size = 4
[[network.layers]]
type = "softmax_ce"
[optimiser]
type = "gradient_descent"
learning_rate = {rate}
[training]
batch_size = 16
epochs = {epochs}
"""

CHECKPOINT = """
[checkpoint]
directory = "{directory}"
every_iterations = {every}
keep = 3
"""


def run_file(tmp_path, *, directory=None, every=1, records=256, rate=0.01, epochs=2) -> Path:
    text = RUN.format(records=records, rate=rate, epochs=epochs)
    if directory is not None:
        text += CHECKPOINT.format(directory=directory, every=every)
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def train(capsys, path, *extra) -> tuple[int, str, list[str]]:
    """Run ``sigma train`` in-process; returns the exit code, stdout and stderr without the info lines."""
    code = main(["train", str(path), "--quiet", *extra])
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if not line.startswith("sigma: ")]


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def sigma(*argv, cwd=ROOT) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sigma_core", *argv], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_line(why: str, state: dict, epochs: int) -> str:
    """The start of the one line ``sigma train`` ends with, for a run stopped by ``why`` in checkpoint ``state``."""
    where = (f"epoch {state['epoch'] + 1} of {epochs}, iteration {state['iteration']}" if state["in_epoch"]
             else f"{state['epoch']} of {epochs} epochs done")
    return f"stopped by {why} after training step {state['total_iterations']} ({where}); saved "


def wait_for(condition, process, what):
    deadline = time.monotonic() + 60
    while not condition():
        assert process.poll() is None, f"sigma ended before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"no {what} after 60 s"
        time.sleep(0.01)


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if an epoch starts: what is refused must be refused before training."""
    def forbidden(self, *args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(Trainer, "open_epoch", forbidden)


# -- item 8: leftovers and locks -----------------------------------------------------------------------------


def test_a_write_killed_midway_leaves_a_leftover_that_the_next_run_removes(tmp_path, capsys):
    directory = tmp_path / "ck"
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom sigma_core.atomic import atomic_write\n"
        "with atomic_write(sys.argv[1]) as f:\n    f.write(b'half a checkpoint'); f.flush()\n"
        "    print('writing', flush=True); time.sleep(60)\n"), str(directory / "run-e0-i1.ckpt")],
        stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "writing\n"
    [leftover] = directory.glob(f".run-e0-i1.ckpt{PARTIAL}{writer.pid}-*")
    assert remove_stale(directory) == []  # its writer is alive: not stale
    writer.kill()
    writer.wait()
    assert leftover.exists()
    live = directory / f".run-e0-i2.ckpt{PARTIAL}{os.getpid()}-0123abcd"  # another live process's write
    live.write_bytes(b"")
    code, _, err = train(capsys, run_file(tmp_path, directory=directory, epochs=1))
    assert code == 0, err
    assert not leftover.exists() and live.exists()
    assert not list(directory.glob(f"*{PARTIAL}{writer.pid}-*"))


def in_use(name, directory, pid) -> str:
    return (f"error: run {name!r} is already training into checkpoint directory {directory} (pid {pid}); wait for it "
            "to end, or give this run another name (--set name=...)")


def test_a_second_run_of_the_same_name_gets_one_line(tmp_path, capsys, no_training):
    directory = tmp_path / "ck"
    with run_lock(directory, "run"):  # as a running `sigma train` of run "run" holds it
        code, out, err = train(capsys, run_file(tmp_path, directory=directory))
    assert code == 2 and out == ""
    assert err == [in_use("run", directory, os.getpid())]


def test_runs_of_other_names_share_a_checkpoint_directory(tmp_path, capsys):
    directory = tmp_path / "ck"
    with run_lock(directory, "other"):  # another run, training into the same directory
        code, _, err = train(capsys, run_file(tmp_path, directory=directory, epochs=1))
    assert code == 0, err
    assert checkpoints(directory, "run") and not checkpoints(directory, "other")


# -- item 15: refused before training, full disk, overflow, Ctrl-C ------------------------------------------------


def test_an_unwritable_checkpoint_directory_is_refused_before_training(tmp_path, capsys, no_training):
    (tmp_path / "file").write_text("a regular file")  # the tests run as root: only a file blocks a directory
    code, out, err = train(capsys, run_file(tmp_path, directory=tmp_path / "file" / "ck"))
    assert code == 2 and out == ""
    assert err == [f"error: checkpoint directory {tmp_path}/file/ck: cannot write there ({tmp_path}/file is a file, "
                   "not a folder)"]
    code, out, err = train(capsys, run_file(tmp_path, directory=tmp_path / "file"))
    assert err == [f"error: checkpoint directory {tmp_path}/file: cannot write there (it is a file, not a folder)"]


@pytest.mark.parametrize("out, reason", [
    ("file/result.json", "cannot write it ({tmp}/file is a file, not a folder)"),
    ("file/sub/result.json", "cannot write it ({tmp}/file is a file, not a folder)"),
    (".", "cannot write it (it is a directory: name a file)"),
    ("x" * 256 + ".json", "cannot write it (its name is too long for the file system)"),
])
def test_an_unwritable_out_path_is_refused_before_training(tmp_path, capsys, no_training, out, reason):
    (tmp_path / "file").write_text("a regular file")
    code, _, err = train(capsys, run_file(tmp_path), "--out", str(tmp_path / out))
    assert code == 2 and err == [f"error: --out {tmp_path / out}: {reason.format(tmp=tmp_path)}"], err


def test_a_full_disk_gives_one_line_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    written = []
    writestr = zipfile.ZipFile.writestr

    def disk_fills_up(self, name, data, *args, **kwargs):
        if len(written) == 3:  # three checkpoints fitted, the fourth does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        writestr(self, name, data, *args, **kwargs)
        if name == "checksum.json":
            written.append(name)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", disk_fills_up)
    directory = tmp_path / "ck"
    code, _, err = train(capsys, run_file(tmp_path, directory=directory))
    assert code == 2
    assert err == [f"error: checkpoint {directory}/run-e0-i4.ckpt: cannot write it (No space left on device); "
                   "the previous checkpoints are kept"]
    assert [p.name for p in checkpoints(directory, "run")] == ["run-e0-i1.ckpt", "run-e0-i2.ckpt", "run-e0-i3.ckpt"]
    load_checkpoint(latest_checkpoint(directory, "run"))
    assert not list(directory.glob(f"*{PARTIAL}*"))


def test_an_overflow_names_the_step_and_says_it_overflowed_without_numpy_warnings(tmp_path, capsys):
    code, _, err = train(capsys, run_file(tmp_path, rate=1e4))
    assert code == 2
    assert len(err) == 1, err  # no RuntimeWarning lines
    assert err[0].startswith("error: trainer 'run': cost became nan at epoch 1, iteration "), err
    assert "the network overflowed float32 computing it (parameters have grown to " in err[0]
    assert "every parameter" not in err[0] and err[0].endswith("lower the learning rate")


def test_ctrl_c_saves_says_how_to_resume_and_a_second_run_of_its_name_cannot_start(tmp_path, capsys):
    directory = tmp_path / "ck"
    path = run_file(tmp_path, directory=directory, every=50, records=4000, epochs=1000)
    victim = sigma("train", str(path), "--quiet", "--set", "training.batch_size=8")
    try:
        wait_for(lambda: latest_checkpoint(directory, "run") is not None, victim, "a checkpoint")
        code, _, err = train(capsys, path)  # meanwhile, a second run on the same directory
        assert code == 2 and err == [in_use("run", directory, victim.pid)]
        victim.send_signal(signal.SIGINT)
        out, err = victim.communicate(timeout=60)
    finally:
        victim.kill()
    assert victim.returncode == 130, err
    lines = [line for line in err.splitlines() if not line.startswith("sigma: ")]
    assert len(lines) == 1 and lines[0].startswith("stopped by Ctrl-C after training step "), err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    saved = latest_checkpoint(directory, "run")  # where the run file's [checkpoint] saves
    state = load_checkpoint(saved).trainer
    assert lines[0] == (f"{stop_line('Ctrl-C', state, 1000)}{saved}; resume with: sigma train {path} "
                        f"--set=training.batch_size=8 --resume {saved}")
    command = shlex.split(lines[0].split("resume with: ")[1])
    assert command[:2] == ["sigma", "train"]
    code, out, err = train(capsys, *command[2:], "--set", f"training.epochs={state['epoch'] + 1}")
    assert code == 0, err
    assert out.startswith(f"run: 1 epoch (of {state['epoch'] + 1} in all) in ")  # the interrupted epoch, finished


def test_ctrl_c_without_a_checkpoint_section_saves_into_the_run_directory_and_resumes_there(tmp_path):
    path = run_file(tmp_path, records=4000, epochs=1000)
    victim = sigma("train", str(path), "--quiet", "--out", "result.json",
                   "--set", 'hooks=[{type="epoch_iteration_reporter", every=[100, "iteration"]}]', cwd=tmp_path)
    try:
        while not victim.stderr.readline().startswith("sigma: epoch 0 iteration 100"):  # training, for sure
            assert victim.poll() is None, victim.communicate()
        victim.send_signal(signal.SIGINT)
        _, err = victim.communicate(timeout=60)
    finally:
        victim.kill()
    assert victim.returncode == 130, err
    [line] = [line for line in err.splitlines() if not line.startswith("sigma: ")]
    [saved] = (tmp_path / "runs" / "run" / "version_0" / "checkpoints").glob("*.ckpt")
    state = load_checkpoint(saved).trainer
    relative = saved.relative_to(tmp_path)
    command = ["sigma", "train", str(path), '--set=hooks=[{type="epoch_iteration_reporter", every=[100, "iteration"]}]',
               "--resume", str(relative)]
    assert line == f"{stop_line('Ctrl-C', state, 1000)}{relative}; resume with: {shlex.join(command)}", err
    assert json.loads((tmp_path / "result.json").read_text())["stopped"] == "Ctrl-C"  # --out says so too
    # The command it printed resumes in the same run directory.
    resumed = sigma(*command[1:], "--set", f"training.epochs={state['epoch'] + 1}", "--quiet", cwd=tmp_path)
    _, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert [p.name for p in (tmp_path / "runs" / "run").iterdir()] == ["version_0"]
    epochs = state["epoch"] + 1
    assert f" ({epochs} of {epochs} epochs done); saved runs/run/version_0/checkpoints/run-e{epochs}-i0.ckpt" in err

"""Ctrl-C and SIGTERM always stop ``sigma train`` (issue 37 item 3), even while an inline hook blocks or loops
forever: the run stops with its stop line, the hook is named, the checkpoint saved loads, and the exit status is
130 (Ctrl-C) or 143 (SIGTERM). Each run is a real ``sigma train`` process; its hook comes from a plugin
installed for it alone (a ``.dist-info`` folder on its ``PYTHONPATH``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from sigma_core.training.checkpoint import load_checkpoint

BLOCKER = '''
import sys
import threading

from sigma_core import Hook, hookimpl


class Blocker(Hook):
    """Inline: at the end of the first epoch, blocks (waits on an event nobody sets) or loops forever."""

    def __init__(self, how: str = "blocks"):
        self.how = how

    def on_epoch(self, report):
        print("holding the run", file=sys.stderr, flush=True)
        if self.how == "blocks":
            threading.Event().wait()
        while True:
            pass


@hookimpl
def register_hooks(register):
    register("blocker", "blocker_mod:Blocker", description="holds the run forever")
'''


@pytest.fixture
def site(tmp_path):
    """A folder holding the blocker plugin, to put on a child's ``PYTHONPATH``."""
    site = tmp_path / "site"
    (site / "blocker_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "blocker_plugin-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: blocker-plugin\n"
                                                                    "Version: 0.1\n")
    (site / "blocker_plugin-0.1.dist-info" / "entry_points.txt").write_text("[sigma]\nblocker = blocker_mod\n")
    (site / "blocker_mod.py").write_text(BLOCKER)
    return site


def _deliverable_sigint():
    """Undo an inherited "ignore SIGINT" (a test run under nohup or in a background job), as a terminal's is not."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["blocks", "loops"])
@pytest.mark.parametrize("signum, why, status", [(signal.SIGINT, "Ctrl-C", 130), (signal.SIGTERM, "SIGTERM", 143)],
                         ids=["ctrl-c", "sigterm"])
def test_the_first_signal_stops_a_run_held_by_an_inline_hook_saves_and_names_the_hook(sigma_run_file, tmp_path, site,
                                                                                        how, signum, why, status):
    sigma_run_file("training.epochs=1000")  # tmp_path/run.toml
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-m", "sigma_core", "train", "run.toml", "--quiet", "--monitor",
                              f"blocker:how='{how}'"], cwd=tmp_path, env=environment, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_deliverable_sigint)
    try:
        lines = []
        while not lines or lines[-1] != "holding the run\n":  # the hook holds the run now
            lines.append(child.stderr.readline())
            assert lines[-1] or child.poll() is None, "".join(lines) + child.communicate()[1]
        child.send_signal(signum)  # once: a second would abort without a checkpoint
        out, err = child.communicate(timeout=120)  # held forever without the fix
    finally:
        child.kill()
    assert child.returncode == status, err
    assert "Traceback" not in err
    assert re.search(rf"sigma: hook 'blocker' failed in on_epoch: TimeoutError: it held the run up 1.0 s after {why}",
                     err), err
    [line] = [line for line in err.splitlines() if line.startswith("stopped by ")]
    assert re.match(rf"stopped by {why} after training step \d+ \(1 of 1000 epochs done\); saved ", line), line
    saved = tmp_path / line.partition("; saved ")[2].partition(";")[0]
    assert load_checkpoint(saved).trainer["epoch"] == 1
    assert "hook that failed and was detached: 'blocker' (on_epoch)" in err

"""A hook that fails is detached and training goes on; ``sigma train`` names it again at the end, in ``--out``'s
JSON, and with ``--strict`` exits with status 4 instead of 0."""

from __future__ import annotations

import json

import pytest

from sigma_core.cli import main

BROKEN = """
    from sigma_core import Hook, hookimpl


    class Broken(Hook):
        def on_epoch(self, report):
            raise OSError(28, "No space left on device")


    @hookimpl
    def register_hooks(register):
        register("broken", Broken)
"""


@pytest.mark.parametrize("strict, status", [(False, 0), (True, 4)])
def test_a_failed_hook_is_named_at_the_end_and_in_out_and_strict_makes_it_an_exit_status(
        fake_site, run_file, tmp_path, capsys, monkeypatch, strict, status):
    monkeypatch.chdir(tmp_path)  # the run's directory, runs/blobs/version_0, goes there
    fake_site.add("broken-hook", entry_points={"broken": "broken_hook"}, modules={"broken_hook": BROKEN})
    out = tmp_path / "result.json"
    argv = ["train", str(run_file), "--quiet", "--monitor", "broken", "--out", str(out), *["--strict"] * strict]
    assert main(argv) == status
    captured = capsys.readouterr()
    assert captured.out.startswith("blobs: 2 epochs in ")  # trained to the end without the hook
    assert captured.err.splitlines()[-1] == "sigma: hook that failed and was detached: 'broken' (on_epoch)"
    result = json.loads(out.read_text())
    assert result["epochs"] == 2 and result["hook_failures"] == [{
        "hook": "broken", "event": "on_epoch",
        "message": "hook 'broken' failed in on_epoch: OSError: [Errno 28] No space left on device"}]


def test_without_a_failure_strict_changes_nothing(run_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(run_file), "--quiet", "--strict", "--out", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["hook_failures"] == []
    assert "failed" not in capsys.readouterr().err

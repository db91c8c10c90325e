"""The ``metrics`` hook: CSV and JSON-lines files that match the run, survive resume and crashes."""

from __future__ import annotations

import csv
import json

import pytest

from sigma_core import config as run_config
from sigma_core.cli import main
from sigma_core import Hook
from sigmann_monitors.metrics import HEADER, MetricsHook
from sigma_core.training.loop import Loop
from sigma_core.run import build_run

def read_csv(directory):
    with (directory / "metrics.csv").open(newline="") as stream:
        return list(csv.reader(stream))


def read_jsonl(directory):
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


def test_the_files_hold_what_the_run_printed(run_file, tmp_path, capsys):
    out = tmp_path / "metrics"
    option = f"metrics:directory='{out}',every=4,values=['total_iterations','network.layers.*.weights']"
    assert main(["train", str(run_file), "--monitor", option, "--monitor", "progress", "--out",
                 str(tmp_path / "summary.json")]) == 0
    history = json.loads((tmp_path / "summary.json").read_text())["history"]
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epoch ")]

    rows = read_csv(out)
    assert rows[0] == list(HEADER) and list(HEADER) not in rows[1:]
    epochs = {}
    for time, event, epoch, iteration, step, name, value in rows[1:]:
        if event == "epoch":
            epochs.setdefault(int(epoch), {})[name] = float(value)
    assert sorted(epochs) == [1, 2]
    for entry, line in zip(history, printed):
        logged = epochs[entry["epoch"]]
        assert (logged["cost"], logged["validation.accuracy"]) == (entry["cost"], entry["accuracy"])  # exact
        assert f"train cost {logged['cost']:.4f}  validation accuracy {logged['validation.accuracy']:.2%}" in line
        assert logged["learning_rate"] == 0.1 and logged["iterations_per_s"] > 0

    *records, stop = read_jsonl(out)
    assert stop == {"time": stop["time"], "event": "stop", "epoch": 2, "iteration": 9, "step": 18, "epochs": 2,
                    "stopped": None}  # how the run ended: its epochs ran out
    iterations = [r for r in records if r["event"] == "iteration"]
    assert [r["step"] for r in iterations] == [4, 8, 12, 16]  # every 4th of 18 iterations
    assert [(r["epoch"], r["iteration"]) for r in iterations] == [(1, 4), (1, 8), (2, 3), (2, 7)]
    assert all(r["total_iterations"] == r["step"] for r in records)  # a named run value, copied at the event
    assert not any("optimiser.updates" in name for r in records for name in r)  # not published: nothing to record
    assert all(isinstance(r["network.layers.2-dense.weights"], float) for r in records)  # an array, as its mean
    assert [(r["epoch"], r["cost"], r["validation.accuracy"]) for r in records if r["event"] == "epoch"] == \
           [(e["epoch"], e["cost"], e["accuracy"]) for e in history]
    assert len(rows) - 1 == sum(len(r) - 5 for r in [*records, stop])  # every value of every record, once in the CSV


def test_a_run_file_run_twice_gives_two_run_directories(run_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["train", str(run_file), "--quiet", "--monitor", "metrics"]) == 0
    runs = tmp_path / "runs" / "blobs"
    assert sorted(path.name for path in runs.iterdir()) == ["version_0", "version_1"]
    for version in runs.iterdir():  # each holds one run: its epochs once, and the checkpoint its end saved
        assert [r["epoch"] for r in read_jsonl(version) if r["event"] == "epoch"] == [1, 2]
        assert [path.name for path in (version / "checkpoints").glob("*.ckpt")] == ["blobs-e2-i0.ckpt"]


def test_a_resumed_run_continues_its_directory_and_drops_the_rows_past_its_checkpoint(run_file, tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open(run_file, "a") as stream:
        stream.write('[checkpoint]\ndirectory = "saves"\nevery_epochs = 1\nkeep = 5\n')
    option = "metrics:every=4"
    assert main(["train", str(run_file), "--quiet", "--monitor", option, "--set", "training.epochs=3"]) == 0
    version = tmp_path / "runs" / "blobs" / "version_0"
    first = read_jsonl(version)
    assert [r["step"] for r in first if r["event"] == "epoch"] == [9, 18, 27]
    capsys.readouterr()
    # From epoch 1's checkpoint: what epochs 2 and 3 logged is trained again, so it goes from both files.
    assert main(["train", str(run_file), "--quiet", "--monitor", option, "--set", "training.epochs=2",
                 "--resume", "saves/blobs-e1-i0.ckpt"]) == 0
    assert [path.name for path in version.parent.iterdir()] == ["version_0"]  # no new version: the same run
    records = read_jsonl(version)
    assert [(r["event"], r["epoch"], r["step"]) for r in records] == [
        ("iteration", 1, 4), ("iteration", 1, 8), ("epoch", 1, 9), ("iteration", 2, 12), ("iteration", 2, 16),
        ("epoch", 2, 18), ("stop", 2, 18)]
    assert records[:3] == first[:3]  # the rows up to the checkpoint, untouched
    rows = read_csv(version)
    assert rows.count(list(HEADER)) == 1 and rows[0] == list(HEADER)
    assert [(row[1], row[4]) for row in rows[1:] if row[5] == "cost"] == [
        (r["event"], str(r["step"])) for r in records if "cost" in r]


def test_a_rerun_into_the_same_directory_replaces_what_was_there_and_a_cut_line_goes(run_file, tmp_path):
    out = tmp_path / "metrics"
    out.mkdir()
    (out / "metrics.csv").write_text(",".join(HEADER) + "\n1.0,iteration,1,1,1,co")
    (out / "metrics.jsonl").write_text('{"time": 1, "event": "iteration", "epoch": 1, "iteration": 1, "step": 1}\n'
                                       '{"time": 1')  # the last line cut short by a crash
    run = build_run(run_config.load(run_file, []))
    run.train([MetricsHook(directory=str(out))])
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["epoch", "iteration", "epoch", "stop"]
    rows = read_csv(out)
    assert rows[0] == list(HEADER) and rows[1][1:6] == ["epoch", "1", "9", "9", "cost"]  # every 10th of 9 per epoch
    assert all(len(row) == 7 for row in rows[1:])


def test_a_file_that_is_not_ours_is_left_alone_and_reported(run_file, tmp_path):
    out = tmp_path / "metrics"
    out.mkdir()
    (out / "metrics.csv").write_text("epoch,loss\n1,0.5\n")
    run = build_run(run_config.load(run_file, []))
    run.trainer.initialise(run.handler)
    loop = Loop(run.trainer, epochs=2, hooks=[MetricsHook(directory=str(out))])
    assert len(loop.run()) == 2
    assert len(loop.dispatcher.failures) == 1
    assert f"{out / 'metrics.csv'}: not a metrics file" in loop.dispatcher.failures[0]
    assert (out / "metrics.csv").read_text() == "epoch,loss\n1,0.5\n"


def test_a_failing_hook_leaves_the_metrics_intact(run_file, tmp_path):
    class Broken(Hook):
        name = "broken"

        def on_epoch(self, report):
            raise OSError("disk on fire")

    out = tmp_path / "metrics"
    run = build_run(run_config.load(run_file, []))
    summary = run.train([Broken(), MetricsHook(directory=str(out), every=1)])
    records = read_jsonl(out)
    assert [r["step"] for r in records if r["event"] == "iteration"] == list(range(1, 19))
    assert [r["cost"] for r in records if r["event"] == "epoch"] == [e["cost"] for e in summary["history"]]


@pytest.mark.parametrize("option, message", [
    ("metrics:every=-1", "error: --monitor[0].every: expected an integer >= 0, got -1"),
    ("metrics:values=[1]", "error: --monitor[0].values: expected a string or an array of strings, got [1]"),
])
def test_bad_arguments_are_one_line_errors(run_file, capsys, option, message):
    assert main(["train", str(run_file), "--quiet", "--monitor", option]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == message

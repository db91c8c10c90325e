"""The ``metrics`` hook: CSV and JSON-lines files that match the run, survive resume and crashes."""

from __future__ import annotations

import csv
import json

import pytest

from sigma_core import config as run_config
from sigma_core.checkpoint import latest_checkpoint
from sigma_core.cli import main
from sigma_core import Hook, MetricsHook
from sigma_core.hooks.metrics import HEADER
from sigma_core.loop import Loop
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

    records = read_jsonl(out)
    iterations = [r for r in records if r["event"] == "iteration"]
    assert [r["step"] for r in iterations] == [4, 8, 12, 16]  # every 4th of 18 iterations
    assert [(r["epoch"], r["iteration"]) for r in iterations] == [(1, 4), (1, 8), (2, 3), (2, 7)]
    assert all(r["total_iterations"] == r["step"] for r in records)  # a named run value, copied at the event
    assert not any("optimiser.updates" in name for r in records for name in r)  # not published: nothing to record
    assert all(isinstance(r["network.layers.2-dense.weights"], float) for r in records)  # an array, as its mean
    assert [(r["epoch"], r["cost"], r["validation.accuracy"]) for r in records if r["event"] == "epoch"] == \
           [(e["epoch"], e["cost"], e["accuracy"]) for e in history]
    assert len(rows) - 1 == sum(len(r) - 5 for r in records)  # every value of every record, once in the CSV


def test_the_run_directory_defaults_to_runs_slash_the_run_name(run_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(run_file), "--quiet", "--monitor", "metrics"]) == 0
    assert [r["epoch"] for r in read_jsonl(tmp_path / "runs" / "blobs") if r["event"] == "epoch"] == [1, 2]


def test_a_resumed_run_appends_under_the_one_header(run_file, tmp_path):
    out, saves = tmp_path / "metrics", tmp_path / "checkpoints"
    with open(run_file, "a") as stream:
        stream.write(f'[checkpoint]\ndirectory = "{saves}"\nevery_epochs = 1\n')
    option = f"metrics:directory='{out}',every=9"
    assert main(["train", str(run_file), "--quiet", "--monitor", option, "--set", "training.epochs=1"]) == 0
    assert main(["train", str(run_file), "--quiet", "--monitor", option, "--set", "training.epochs=3",
                 "--resume", str(latest_checkpoint(saves, "blobs"))]) == 0
    rows = read_csv(out)
    assert rows.count(list(HEADER)) == 1 and rows[0] == list(HEADER)
    records = read_jsonl(out)
    assert [(r["event"], r["epoch"], r["step"]) for r in records] == [
        ("iteration", 1, 9), ("epoch", 1, 9), ("iteration", 2, 18), ("epoch", 2, 18), ("iteration", 3, 27),
        ("epoch", 3, 27)]


def test_a_line_cut_short_by_a_crash_stays_on_its_own(run_file, tmp_path):
    out = tmp_path / "metrics"
    out.mkdir()
    (out / "metrics.csv").write_text(",".join(HEADER) + "\n1.0,iteration,1,1,1,co")
    (out / "metrics.jsonl").write_text('{"event": "iteration"}\n{"time": 1')
    run = build_run(run_config.load(run_file, []))
    run.train([MetricsHook(directory=str(out))])
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert lines[:2] == ['{"event": "iteration"}', '{"time": 1']
    assert [json.loads(line)["event"] for line in lines[2:]] == ["epoch", "iteration", "epoch"]
    rows = read_csv(out)
    assert rows[1] == ["1.0", "iteration", "1", "1", "1", "co"]
    assert rows[2][1:6] == ["epoch", "1", "9", "9", "cost"]  # 9 iterations per epoch, every 10th logged by default
    assert all(len(row) == 7 for row in rows[2:])


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

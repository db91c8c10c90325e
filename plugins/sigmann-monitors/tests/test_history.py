"""Reading a metrics file at any length (:mod:`sigmann_monitors.history`): downsampled, a range, the tail."""

from __future__ import annotations

import json
import math

import pytest

from sigma_core import SigmaError
from sigmann_monitors import read_history, read_new


def iteration(step: int, cost: float) -> dict:
    return {"time": step / 10, "event": "iteration", "step": step, "epoch": 1, "iteration": step, "cost": cost,
            "learning_rate": 0.1}


def write(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_long_series_keeps_about_the_points_asked_for_with_its_spike_and_its_dip(tmp_path):
    costs = {step: 1.0 + (step % 7) / 100 for step in range(1, 20_001)}
    costs[12_345], costs[777] = 50.0, -3.0
    write(tmp_path / "metrics.jsonl", [iteration(step, cost) for step, cost in costs.items()])
    history = read_history(tmp_path, points=200)
    kept = [r["cost"] for r in history.records]
    # the cost's least and greatest of each of 100 ranges, the constant learning rate's one, and the last record
    assert len(kept) <= 301 and 50.0 in kept and -3.0 in kept
    assert history.read == 20_000 and history.last["step"] == 20_000 == history.records[-1]["step"]


def test_a_range_reads_every_record_in_it_when_they_are_fewer_than_the_points(tmp_path, monkeypatch):
    monkeypatch.setattr("sigmann_monitors.history.BLOCK", 4096)  # many blocks: the bisection has work to do
    write(tmp_path / "metrics.jsonl", [iteration(step, 1.0 / step) for step in range(1, 5001)])
    history = read_history(tmp_path, start=3000, end=3200)
    assert [r["step"] for r in history.records] == list(range(3000, 3201))


def test_read_new_takes_whole_lines_only(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write(path, [iteration(1, 1.0)])
    offset = read_history(path).offset
    with path.open("a") as stream:
        stream.write(json.dumps(iteration(2, 0.5)) + "\n" + json.dumps(iteration(3, 0.4))[:20])  # being written
    rows, offset = read_new(path, offset)
    assert [r["step"] for r in rows] == [2]
    with path.open("a") as stream:
        stream.write(json.dumps(iteration(3, 0.4))[20:] + "\n")
    assert [r["step"] for r in read_new(path, offset)[0]] == [3]


def test_a_bad_record_deep_in_a_long_file_is_named_by_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr("sigmann_monitors.history.BLOCK", 4096)
    rows = [iteration(step, 1.0) for step in range(1, 3001)]
    rows[2500]["cost"] = "1.0"
    write(tmp_path / "metrics.jsonl", rows)
    with pytest.raises(SigmaError, match=r"metrics.jsonl line 2501: not a metrics record \(cost: expected a number"):
        read_history(tmp_path)


def test_every_record_reads_the_same_whether_its_block_decodes_typed_or_as_dicts(tmp_path, monkeypatch):
    # Blocks of 4 KiB: most decode into Structs, the first taught each key (a score only from step 1,500 on); the
    # one with a NaN (no JSON for msgspec) is read as dicts. Points enough to keep every record: each must come
    # back with the values, nulls and absent keys it was written with.
    monkeypatch.setattr("sigmann_monitors.history.BLOCK", 4096)
    rows = [iteration(step, 1.0 / step) for step in range(1, 3001)]
    rows[100]["cost"], rows[200]["cost"], rows[300]["time"] = math.nan, None, None
    del rows[400]["learning_rate"]
    for row in rows[1499:]:
        row["score"] = row["step"] % 13
    rows.insert(1000, {"time": 1.0, "event": "epoch", "step": 1000, "epoch": 1, "iteration": 1000, "cost": 0.5,
                       "validation.cost": 0.6})
    write(tmp_path / "metrics.jsonl", rows)
    history = read_history(tmp_path, points=20_000)
    assert [json.dumps(r, sort_keys=True) for r in history.records] == [json.dumps(r, sort_keys=True) for r in rows]
    assert history.read == 3001 and history.epochs == 1 and history.iterations_per_epoch == 1000


def test_a_series_first_logged_late_keeps_its_spike(tmp_path, monkeypatch):
    monkeypatch.setattr("sigmann_monitors.history.BLOCK", 4096)
    rows = [iteration(step, 1.0) for step in range(1, 5001)]
    for row in rows[4000:]:
        row["gradient.norm"] = 1.0 + (row["step"] == 4321) * 99
    write(tmp_path / "metrics.jsonl", rows)
    norms = [r["gradient.norm"] for r in read_history(tmp_path, points=100).records if "gradient.norm" in r]
    assert 100.0 in norms and len(norms) <= 50


def test_a_count_that_is_not_an_integer_is_named_even_in_a_block_that_decodes_at_once(tmp_path):
    rows = [iteration(step, 1.0) for step in range(1, 101)]
    rows[41]["step"] = 42.0  # JSON 42.0: whole, but not the integer the metrics hook writes
    write(tmp_path / "metrics.jsonl", rows)
    with pytest.raises(SigmaError, match=r"metrics.jsonl line 42: not a metrics record \(step: expected an integer"):
        read_history(tmp_path)

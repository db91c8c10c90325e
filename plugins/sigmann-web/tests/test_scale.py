"""``sigma dashboard`` on a long run (issue 37): a 125 MB ``metrics.jsonl`` opens in bounded time and memory, and
a file still being written is followed from where the last read ended.

The file (conftest's ``long_run``) holds some 880,000 records, and one spike of the cost that a chart must not
lose. The bounds are generous (a busy two-core machine), the one on time at least three times a plain JSON pass
over the file measured beside it; BENCHMARKS.md, "Issue 37: dashboard at scale", has the figures measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from sigmann_web.board import board_from_files

#: Bytes of the long run's metrics.jsonl.
SIZE = 125_000_000


def json_pass_seconds(path) -> float:
    """About how long the standard library's JSON decoder takes over every line of ``path`` on this machine now
    (a tenth of them timed): the baseline a bound on time scales with, so that a loaded machine passes."""
    began, size = time.monotonic(), path.stat().st_size
    with path.open("rb") as stream:
        for line in stream:
            json.loads(line)
            if stream.tell() > size // 10:
                break
    return 10 * (time.monotonic() - began)


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used (user and system), in seconds: what a loaded machine does not inflate."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_resident_mb(pid: int) -> float:
    """The most memory process ``pid`` has held resident (Linux's VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1000


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's peak memory from /proc")
def test_a_125_mb_metrics_file_opens_in_bounded_time_memory_and_answer_size(tmp_path, long_run):
    written = long_run(tmp_path / "long", SIZE)
    last, spike = written["last"], written["spike"]
    limit = max(10.0, 3 * json_pass_seconds(tmp_path / "long" / "metrics.jsonl"))  # 10 s, unless loaded
    began = time.monotonic()
    dashboard = subprocess.Popen([sys.executable, "-m", "sigma_core", "dashboard", str(tmp_path / "long")],
                                 stderr=subprocess.PIPE, text=True)
    try:
        line = dashboard.stderr.readline()
        assert "dashboard of long at http://127.0.0.1:" in line, line + dashboard.stderr.read()
        url = line.split(" at ")[1].split()[0].rstrip("/")
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.get("/").status_code == 200
            history = client.get("/api/history")
            opened, cpu = time.monotonic() - began, cpu_seconds(dashboard.pid)
            zoomed = client.get("/api/history", params={"start": spike - 4000, "end": spike + 4000})
        resident = peak_resident_mb(dashboard.pid)
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=30)
    print(f"page and /api/history in {opened:.2f} s (limit {limit:.1f} s), the server's CPU {cpu:.2f} s; "
          f"{len(history.content):,} bytes; peak resident {resident:.0f} MB")
    records = history.json()["records"]
    costs = [r["cost"] for r in records if r["event"] == "iteration"]
    assert opened < limit, f"page and history took {opened:.1f} s"
    assert resident < 500, f"the server held {resident:.0f} MB"
    assert len(history.content) < 2_000_000, f"/api/history answered {len(history.content):,} bytes"
    assert 500 <= len(costs) <= 2000 and max(costs) == 100.0  # about 1,000 points, the spike among them
    assert records[-1]["step"] == last and [r["step"] for r in records] == sorted(r["step"] for r in records)
    # a zoomed range small enough to have fewer records than points: every one of them, and no other
    detail = zoomed.json()["records"]
    assert [r["step"] for r in detail if r["event"] == "iteration"] == list(range(spike - 4000, spike + 4001, 10))
    assert len([r for r in detail if r["event"] == "epoch"]) == 8


def test_a_run_still_writing_its_metrics_file_is_followed_from_where_the_last_read_ended(tmp_path, long_run):
    long_run(tmp_path / "run", 200_000)
    path = tmp_path / "run" / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # no stop record yet: still training
    board = board_from_files(tmp_path / "run")
    last = board.records[-1]
    assert board.state()["state"] == "ended" and not board.pump()
    more = {**last, "event": "iteration", "step": last["step"] + 10, "cost": 0.5}
    stop = {"time": 1.0, "event": "stop", "epoch": last["epoch"], "iteration": 10, "step": more["step"],
            "epochs": last["epoch"], "stopped": None}
    with path.open("a") as stream:
        stream.write(json.dumps(more) + "\n" + json.dumps(stop) + "\n")
    assert board.pump()
    assert board.take()["records"] == [more] and board.records[-1] == more
    assert board.state()["state"] == "finished" and board.state()["step"] == more["step"]

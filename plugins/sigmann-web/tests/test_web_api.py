"""The web hook's JSON API against a real server and a live run: security, controls, edits, inference, streams."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy
import pytest
from sigmann_testing import default_ctrl_c

from sigma_core import ConfigError, plugins
from sigma_core.training.checkpoint import load_checkpoint
from sigma_core.cli import main
from sigma_core.training.loop import EpochReport, Loop
from sigmann_web.board import PER_FLUSH, Board
from sigmann_web.hook import WebHook, bounds, guess_image
from sigmann_web.server import Server

POSTS = {"/api/control": {"action": "pause"}, "/api/set": {"key": "optimiser.learning_rate", "value": 0.5},
         "/api/predict": {"pixels": [0.0] * 64}, "/api/watch": {"key": "optimiser.learning_rate"}}


def test_every_state_changing_request_needs_the_token(live):
    run = live()
    for path, body in POSTS.items():
        refused = run.post(path, token=False, **body)
        assert refused.status_code == 403 and "token" in refused.json()["error"], path
        wrong = run.client.post(path, json=body, headers={"X-Sigma-Token": "x" + run.server.token})
        assert wrong.status_code == 403, path
    assert run.loop.state.value == "running" and run.trainer.optimiser.learning_rate == 0.01  # nothing changed
    assert run.client.get("/api/state", headers={"X-Sigma-Token": ""}).status_code == 200  # reading needs none
    assert run.client.get("/api/state", headers={"Host": "attacker.example"}).status_code == 400  # DNS rebinding
    page = run.client.get("/")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"] and "<title>Sigma" in page.text
    assert run.client.get("/static/uPlot.iife.min.js").status_code == 200  # shipped, no internet needed


def test_pause_step_set_extend_and_reset_act_on_the_trainer(live):
    run = live()
    run.wait_for(lambda: run.trainer.total_iterations > 20, what="training")
    paused = run.post("/api/control", action="pause").json()
    assert paused["state"]["state"] == "paused" and paused["message"] == "paused"
    step = run.trainer.total_iterations
    assert paused["state"]["step"] == step
    time.sleep(0.3)
    assert run.trainer.total_iterations == step and run.state()["step"] == step
    stepped = run.post("/api/control", action="step").json()
    assert stepped["state"]["step"] == step + 1 == run.trainer.total_iterations
    assert stepped["state"]["state"] == "paused"

    assert run.post("/api/set", key="optimiser.learning_rate", value=0.0123).json()["message"] == \
        "optimiser.learning_rate = 0.0123"
    assert run.trainer.optimiser.learning_rate == 0.0123
    assert run.state()["settings"]["optimiser.learning_rate"] == 0.0123
    assert run.post("/api/set", key="network.layers.3-dropout.p", value=0.25).status_code == 200
    assert run.trainer.network.layers["3-dropout"].p == 0.25
    for key, value, message in [
            ("optimiser.learning_rate", -1, "optimiser.learning_rate: expected a finite number >= 0, got -1"),
            ("optimiser.learning_rate", "fast", "optimiser.learning_rate: expected a finite number >= 0, got 'fast'"),
            ("network.layers.3-dropout.p", 1, "network.layers.3-dropout.p: expected a finite number in [0, 1), got 1"),
            ("optimiser.freeze", 1, "cannot set 'optimiser.freeze'; settable: optimiser.learning_rate, "
                                    "optimiser.momentum, optimiser.weight_decay, network.layers.3-dropout.p")]:
        refused = run.post("/api/set", key=key, value=value)
        assert (refused.status_code, refused.json()) == (400, {"error": message})
    assert run.trainer.optimiser.learning_rate == 0.0123
    refused = run.post("/api/control", action="fly")
    assert refused.status_code == 400 and refused.json()["error"].startswith("unknown action 'fly'")

    extended = run.post("/api/control", action="extend", epochs=7).json()
    assert extended["message"] == "extended to 100007 epochs" and run.loop.epochs == 100_007
    assert run.post("/api/control", action="extend", epochs=0).status_code == 400

    resumed = run.post("/api/control", action="resume").json()
    assert resumed["state"]["state"] == "running"
    refused = run.post("/api/control", action="step")  # not paused: the operator's own message
    assert refused.status_code == 409 and "it is running, not paused" in refused.json()["error"]

    run.post("/api/control", action="pause")
    reset = run.post("/api/control", action="reset").json()
    assert reset["message"] == "reset to the initial parameters"
    assert (reset["state"]["state"], reset["state"]["step"], run.trainer.total_iterations) == ("paused", 0, 0)
    assert run.trainer.optimiser.learning_rate == 0.01  # the optimiser's initial hyperparameters are back
    now = run.trainer.network.state_dict()
    for key, initial in run.initial.items():
        numpy.testing.assert_array_equal(now[key], initial, err_msg=key)


def test_a_run_started_paused_waits_for_start(live):
    run = live(paused=True)
    run.wait_for(lambda: run.state()["state"] == "paused", what="the pause before the first iteration")
    time.sleep(0.2)
    assert run.trainer.total_iterations == 0
    assert run.post("/api/control", action="start").json()["message"] == "started"
    run.wait_for(lambda: run.trainer.total_iterations > 0, what="training")


def test_a_drawing_is_classified_on_the_training_thread(live):
    run = live()
    threads = []
    original = run.trainer.network.forward
    run.trainer.network.forward = lambda *a, **k: (threads.append(__import__("threading").current_thread()),
                                                   original(*a, **k))[1]
    pixels = numpy.zeros((8, 8))
    pixels[1:7, 3:5] = 1.0
    answer = run.post("/api/predict", pixels=pixels.tolist()).json()
    probabilities = answer["probabilities"]
    assert len(probabilities) == 10 and sum(probabilities) == pytest.approx(1, abs=1e-5)
    assert answer["predicted"] == int(numpy.argmax(probabilities))
    assert run.loop._thread in threads  # inference ran between iterations, on the training thread
    for pixels, message in [([0.5], "pixels must be 8×8 = 64 numbers, got shape [1]"),
                            ([2.0] * 64, "pixels must be numbers in [0, 1]"),
                            ("abc", "pixels: expected an array, got 'abc'"),
                            ([[0.5] * 8] * 7 + [[0.5] * 7], "pixels must be an array of numbers, or an array of rows"),
                            (["0.5"] * 64, "pixels must be an array of numbers, or an array of rows")]:
        refused = run.post("/api/predict", pixels=pixels)
        assert refused.status_code == 400 and refused.json()["error"].startswith(message)


def test_registry_values_can_be_added_to_the_charts(live):
    run = live()
    answer = run.post("/api/watch", key="network.layers.*.weights").json()
    assert answer["keys"] == ["network.layers.2-dense.weights", "network.layers.4-dense.weights"]
    run.wait_for(lambda: any("network.layers.2-dense.weights" in r for r in
                             run.client.get("/api/history").json()["records"]), what="the watched value")
    refused = run.post("/api/watch", key="nothing.here.*")
    assert refused.status_code == 400 and "matches no number or array" in refused.json()["error"]


def test_history_answers_a_range_of_steps_and_refuses_one_that_is_not_a_number(live):
    run = live()
    run.wait_for(lambda: len(run.client.get("/api/history").json()["records"]) > 20, what="some chart points")
    steps = [r["step"] for r in run.client.get("/api/history").json()["records"]]
    start, end = steps[5], steps[15]
    answer = run.client.get("/api/history", params={"start": start, "end": end}).json()
    ranged = [r["step"] for r in answer["records"]]
    assert (answer["start"], answer["end"]) == (start, end) and ranged and start <= min(ranged) <= max(ranged) <= end
    for bad in ("ten", "nan", "inf"):
        refused = run.client.get("/api/history", params={"start": bad})
        assert refused.status_code == 400 and refused.json() == {"error": f"start must be a step (a number), got {bad!r}"}


def test_the_event_stream_sends_a_snapshot_then_updates(live):
    run = live()
    with httpx.stream("GET", f"{run.base}/api/events", timeout=20) as stream:
        lines = stream.iter_lines()
        snapshot = json.loads(next(line for line in lines if line.startswith("data:"))[5:])
        assert snapshot["type"] == "snapshot" and [r["run"] for r in snapshot["runs"]] == ["blobs"]
        board = snapshot["runs"][0]
        assert board["info"]["image"] == [8, 8] and board["info"]["classes"] == 10
        weights = board["weights"]
        tiles = numpy.frombuffer(base64.b64decode(weights["tiles"]), numpy.int8).reshape(weights["count"], 8, 8)
        assert weights["shape"] == [8, 8] and weights["count"] == 16 and weights["layer"] == "2-dense.weights"
        assert (numpy.abs(tiles).max(axis=(1, 2)) == 127).all()  # each image scaled to its own largest weight
        steps = []
        for line in lines:
            if line.startswith("data:"):
                update = json.loads(line[5:])
                assert update["type"] == "update" and update["run"] == "blobs"
                steps += [r["step"] for r in update["records"] if r["event"] == "iteration"]
                if len(steps) >= 5:
                    break
    assert steps == sorted(steps) and all(step % 10 == 0 for step in steps)  # every 10th iteration, in order


def test_stop_and_save_writes_a_checkpoint_and_the_server_stops(live, tmp_path):
    run = live(checkpoints=str(tmp_path))
    run.wait_for(lambda: run.trainer.total_iterations > 5, what="training")
    answer = run.post("/api/control", action="stop", save=True).json()
    path = answer["message"].split("saved ")[1].split(";")[0]
    assert answer["state"]["state"] == "stopped" and path.startswith(str(tmp_path))
    assert load_checkpoint(path).trainer["total_iterations"] == run.trainer.total_iterations
    run.server.thread.join(30)  # it stops half a second after the run; 30 s: a starved CI machine
    assert not run.server.thread.is_alive()  # the last run ended: the server stopped by itself
    with pytest.raises(httpx.ConnectError):
        httpx.get(run.base + "/api/state")


def test_a_stuck_server_or_stuck_pages_never_hold_training_up(live):
    run = live(every=1)
    stuck = []
    for _ in range(10):  # ten pages that never read their stream
        page = socket.create_connection((run.server.host, run.server.port))
        page.sendall(b"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        stuck.append(page)
    run.wait_for(lambda: len(run.server.pages) == 10, what="ten open streams")
    run.server.loop.call_soon_threadsafe(time.sleep, 3)  # the server's thread stops serving for 3 s
    time.sleep(0.2)
    before = run.trainer.total_iterations
    time.sleep(1)
    assert run.trainer.total_iterations > before + 50  # training went on meanwhile
    assert len(run.hook.board.inbox) <= 4096  # bounded: the oldest entries make room
    for page in stuck:
        page.close()
    run.wait_for(lambda: not run.server.pages, what="closed pages to be forgotten")
    run.wait_for(lambda: run.state()["step"] >= run.trainer.total_iterations - 200, what="the board to catch up")


def test_several_trainers_in_one_process_share_one_server_with_a_tab_each(built):
    hooks, loops = [WebHook(), WebHook()], []
    for name, hook in zip(("left", "right"), hooks):
        loops.append(Loop(built(name=name, epochs=2).trainer, epochs=2, hooks=[hook]))
        loops[-1].start()
    for loop in loops:
        loop.join(60)
    server = hooks[0].server
    assert hooks[1].server is server
    # Boards join on the server's thread (call_soon_threadsafe), maybe after training ended: read them once
    # that thread is done. It stops by itself, half a second after the last run; 30 s: a starved CI machine.
    server.thread.join(30)
    assert not server.thread.is_alive()
    assert sorted(server.boards) == ["left", "right"]
    assert [b.ended for b in server.boards.values()] == ["finished", "finished"]


def test_a_request_sent_as_soon_as_the_address_is_known_is_answered():
    server = Server()  # `sigma dashboard` prints the address here, before uvicorn serves
    early = socket.create_connection((server.host, server.port), timeout=20)  # was refused until uvicorn listened
    early.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    server.start()
    try:
        assert early.makefile("rb").readline().startswith(b"HTTP/1.1 200")
    finally:
        early.close()
        server.stop()


def test_another_address_needs_the_host_option_and_warns(live, caplog):
    with caplog.at_level(logging.WARNING, logger="sigma"):
        run = live(host="0.0.0.0")
    assert run.server.host == "0.0.0.0"
    assert "web: serving on 0.0.0.0" in caplog.text and "reachable from other machines" in caplog.text
    assert WebHook().host == "127.0.0.1"


def test_bad_options_are_one_line_errors(run_file, capsys):
    run_file = run_file(epochs=1)
    assert main(["train", str(run_file), "--quiet", "--monitor", "web:image=[4, 4]"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "error: web: image = [4, 4] does not match the network's input shape [8, 8]")
    for option, message in [("port=-1", "port: expected an integer in [0, 65535], got -1"),
                            ("port=70000", "port: expected an integer in [0, 65535], got 70000"),
                            ("every=-10", "every: expected an integer >= 0, got -10"),
                            ("max_points=5", "max_points: expected an integer >= 100, got 5"),
                            ("top=[0]", "top: expected a positive integer or an array of them, got [0]"),
                            ("input_range=[0]",
                             "input_range: expected [min, max], two finite numbers or null, got [0]"),
                            ("host=1", "host: expected a string, got 1"),
                            ("paused='yes'", "paused: expected true or false, got 'yes'")]:
        assert main(["train", str(run_file), "--quiet", "--monitor", f"web:{option}"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: --monitor[0].{message}", option
    with pytest.raises(ConfigError, match=re.escape("web: port: expected an integer in [0, 65535], got 70000")):
        WebHook(port=70000)  # built in Python: the same rules
    assert main(["dashboard", "--port", "70000", str(run_file.parent)]) == 2
    assert "70000" in capsys.readouterr().err.strip().splitlines()[-1]
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    assert main(["train", str(run_file), "--quiet", "--monitor", f"web:port={port}"]) == 2
    assert f"error: web: cannot listen on 127.0.0.1:{port} (Address already in use)" in capsys.readouterr().err
    busy.close()


def test_a_fast_run_costs_the_server_no_more_points_than_a_slow_one():
    def values(step):
        return {"time": step / 1000, "epoch": 0, "iteration": step, "total_iterations": step,
                "cost": 1.0, "learning_rate": 0.1}

    board = Board("fast", {}, max_points=300)
    report = EpochReport(epoch=1, cost=1.0, seconds=1.0, iterations=1000)
    for step in range(1, 1001):
        board.post("iteration", values(step), {})
        if step == 500:
            board.post("epoch", values(step), {}, (report, {}, None))
    board.pump()
    steps = [r["step"] for r in board.take()["records"] if r["event"] == "iteration"]
    assert len(steps) == PER_FLUSH and steps[-1] == 1000 and steps == sorted(steps)  # evenly thinned, last kept
    assert [r["step"] for r in board.records if r["event"] == "epoch"] == [500]
    assert board.values["total_iterations"] == 1000
    for step in range(1001, 3001):  # past max_points: older iteration points are halved, epoch records stay
        board.post("iteration", values(step), {})
        board.pump()
    assert len(board.records) <= 300 and board.records[-1]["step"] == 3000
    assert any(r["event"] == "epoch" for r in board.records)


def test_what_the_page_is_told_about_the_network():
    assert guess_image((64,)) == (8, 8) and guess_image((784,)) == (28, 28) and guess_image((28, 28, 1)) == (28, 28)
    assert guess_image((5,)) is None and guess_image((10, 3)) is None and guess_image(None) is None
    assert bounds("number in [0, 1)") == {"min": 0.0, "max": 1.0, "min_open": False, "max_open": True}
    assert bounds("number >= 0") == {"min": 0.0, "min_open": False} and bounds("number") == {}
    assert plugins.get("hook", "web").distribution == "sigmann-web"
    assert plugins.get("command", "dashboard").distribution == "sigmann-web"


def sigma(*arguments, **options):
    """``sigma ...`` in a new process, its stderr a pipe; in its own process group, so SIGINT reaches it alone."""
    return subprocess.Popen([sys.executable, "-c", "from sigma_core.cli import main; raise SystemExit(main())",
                             *arguments], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_ctrl_c, **options)


def url_of(process) -> str:
    for line in process.stderr:
        if line.startswith("sigma web: "):
            return line.split(" at ")[1].split()[0]
    raise AssertionError(f"no URL printed; exit status {process.wait()}")


def test_sigma_train_serves_until_the_end_or_keeps_serving_until_ctrl_c(run_file):
    run_file = run_file(epochs=2)
    ended = sigma("train", str(run_file), "--quiet", "--monitor", "web")
    url_of(ended)
    out, err = ended.communicate(timeout=60)
    assert ended.returncode == 0 and "blobs: 2 epochs" in out  # the server stopped with the run: no hang

    kept = sigma("train", str(run_file), "--quiet", "--monitor", "web:keep_serving=true")
    url = url_of(kept)
    assert kept.stderr.readline().startswith("finished after training step 80 (2 of 2 epochs done); saved ")
    assert "stays up read-only" in kept.stderr.readline()
    base, token = url.split("?token=")
    state = httpx.get(base + "api/state").json()
    assert (state["state"], state["live"], state["epoch"]) == ("finished", False, 2)
    refused = httpx.post(base + "api/control", json={"action": "pause"}, headers={"X-Sigma-Token": token})
    assert refused.status_code == 409 and refused.json()["error"] == "the run has ended; the dashboard is read-only"
    drawn = httpx.post(base + "api/predict", json={"pixels": [0.5] * 64}, headers={"X-Sigma-Token": token})
    assert len(drawn.json()["probabilities"]) == 10  # the trained network still answers drawings
    os.killpg(kept.pid, signal.SIGINT)
    kept.communicate(timeout=20)
    assert kept.returncode == 0

    interrupted = sigma("train", str(run_file), "--quiet", "--monitor", "web", "--set", "training.epochs=100000")
    url_of(interrupted)
    time.sleep(0.5)
    os.killpg(interrupted.pid, signal.SIGINT)  # Ctrl-C stops training and the server
    out, err = interrupted.communicate(timeout=30)
    assert interrupted.returncode == 130 and "stopped by Ctrl-C after training step" in err


def test_sigma_train_serves_the_grid_the_dream_hook_publishes(run_file, tmp_path):
    """sigmann-debug's ``dream`` hook, where it is installed, publishes its grid's path as a run value; the
    dashboard serves it knowing nothing of that hook."""
    if not any(component.name == "dream" for component in plugins.components("hook")):
        pytest.skip("the dream hook (sigmann-debug) is not installed")
    kept = sigma("train", str(run_file(epochs=1)), "--quiet", "--monitor", "web:keep_serving=true",
                 "--monitor", "dream:every=1,max_steps=20", cwd=tmp_path)
    base = url_of(kept).split("?token=")[0]
    assert "stays up read-only" in kept.stderr.readline() + kept.stderr.readline()  # the run has ended
    try:
        assert httpx.get(base + "api/state").json()["images"]["dream"]["path"] == \
            "runs/blobs/version_0/dreams/epoch_0001.png"
        grid = httpx.get(base + "api/image", params={"value": "dream"})
        latest = tmp_path / "runs/blobs/version_0/dreams/latest.png"  # the same picture as the epoch's
        assert grid.status_code == 200 and grid.content == latest.read_bytes()
    finally:
        os.killpg(kept.pid, signal.SIGINT)
        kept.communicate(timeout=20)


def test_sigma_dashboard_shows_a_finished_run_read_only(run_file, tmp_path):
    run_file = run_file(epochs=2)
    assert main(["train", str(run_file), "--quiet", "--monitor", f"metrics:directory='{tmp_path / 'blobs'}'"]) == 0
    dashboard = sigma("dashboard", str(tmp_path / "blobs"))
    url = url_of(dashboard)
    assert "?token" not in url
    history = httpx.get(url + "api/history").json()
    assert history["run"] == "blobs" and [r["epoch"] for r in history["records"] if r["event"] == "epoch"] == [1, 2]
    assert httpx.get(url + "api/state").json()["state"] == "finished"
    assert httpx.post(url + "api/control", json={"action": "pause"}).status_code == 403
    os.killpg(dashboard.pid, signal.SIGINT)  # Ctrl-C: a clean stop, exit status 130 as for sigma train
    out, err = dashboard.communicate(timeout=20)
    assert dashboard.returncode == 130 and "Traceback" not in err, err
    assert main(["dashboard", str(tmp_path / "nothing")]) == 2

"""The web hook over a long run: what it reads and the drawings it classifies keep no arrays (issue 24)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from sigmann_testing import ArrayCensus

from sigma_core import Loop, State, build_run
from sigma_core import config as run_config
from sigmann_monitors import MetricsHook
from sigmann_web.hook import WebHook

# 8×8 "images" in 10 classes, so that the dashboard can classify drawings; replayed steps.
RUN = {"name": "memory", "seed": 0, "data": {"extractor": "synthetic", "n": 400, "shape": [8, 8], "classes": 10},
       "split": {"validation": 0.2},
       "network": {"layers": [{"type": "input", "shape": [8, 8]}, {"type": "dense", "size": 16, "activation": "relu"},
                              {"type": "dropout", "p": 0.1}, {"type": "dense", "size": 10}, {"type": "softmax_ce"}]},
       "optimiser": {"type": "momentum", "learning_rate": 0.01},
       "training": {"batch_size": 8, "epochs": 8, "prefetch": 0, "compile": "replay"}}


@pytest.mark.parametrize("handler", ["numpy", "cpu"])
def test_a_watched_replayed_run_keeps_no_arrays_from_epoch_to_epoch(handler, tmp_path):
    run = build_run(run_config.validate({**RUN, "handler": {"name": handler}}))
    run.trainer.initialise(run.handler)
    hook, census = WebHook(paused=True), ArrayCensus()  # paused: it waits for the visitor's start
    loop = Loop(run.trainer, epochs=8, hooks=[hook, MetricsHook(directory=str(tmp_path)), census])
    answers, stop = [], threading.Event()

    def draw():  # a visitor drawing digits all along: each is classified on the training thread (a ``call``)
        deadline = time.monotonic() + 30
        try:
            while hook.server is None or hook.board is None or hook.board.name not in hook.server.boards:
                if stop.wait(0.01) or time.monotonic() > deadline:
                    return
            run_name = hook.board.name  # the server outlives a run: an earlier test's may be there too
            with httpx.Client(base_url=hook.server.url(with_token=False).rstrip("/"), timeout=20,
                              headers={"X-Sigma-Token": hook.server.token}) as client:
                while not stop.is_set() and (answers or time.monotonic() < deadline):
                    answer = client.post("/api/predict", json={"run": run_name, "pixels": [[0.5] * 8] * 8})
                    if answer.status_code == 200:
                        answers.append(answer.json()["predicted"])
                    if len(answers) == 1:
                        client.post("/api/control", json={"run": run_name, "action": "start"})
                    time.sleep(0.002)
        except httpx.TransportError:  # the run has ended and its server with it
            pass
        finally:
            if not answers:  # never answered, so never started: end the paused run, and the test fails
                loop.signal_stop()

    visitor = threading.Thread(target=draw, daemon=True)
    visitor.start()
    try:
        loop.run()
    finally:
        stop.set()
        visitor.join(30)
    assert loop.state is State.STOPPED and answers
    census.assert_flat()

"""The loop's ``call`` command: a function run on the training thread at an iteration boundary."""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import pytest

from sigma_core import config as run_config
from sigma_core.errors import SigmaError
from sigma_core import Loop, State
from sigma_core.run import build_run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def loop(epochs=100_000) -> Loop:
    raw = tomllib.loads((EXAMPLES / "iris.toml").read_text())
    raw["training"]["epochs"] = epochs
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    return Loop(run.trainer, epochs=epochs)


def where(trainer):
    """What a call sees: the thread it runs on and whether it landed between two iterations."""
    return threading.current_thread(), trainer.total_iterations, trainer.iteration


def test_a_call_runs_on_the_training_thread_while_running_and_while_paused():
    op = loop()
    trainer = op.trainer
    op.start()
    try:
        thread, total, _ = op.command("call", fn=lambda: where(trainer)).result(timeout=10)
        assert thread is op._thread and total >= 0
        op.signal_pause()
        assert op.wait_for_state_changed(10)
        paused_at = trainer.total_iterations
        thread, total, _ = op.command("call", fn=lambda: where(trainer)).result(timeout=10)
        assert thread is op._thread and total == paused_at  # served by the blocked loop, which stays paused
        assert op.wait_for_state_changed(10) and op.state is State.PAUSED
        assert trainer.total_iterations == paused_at
    finally:
        op.signal_stop()
        op.join(10)


def test_a_failing_call_hands_its_error_back_and_training_goes_on():
    op = loop()
    op.start()
    try:
        future = op.command("call", fn=lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            future.result(timeout=10)
        before = op.trainer.total_iterations
        assert op.command("call", fn=lambda: op.trainer.total_iterations).result(timeout=10) >= before
        assert op.state is State.RUNNING
    finally:
        op.signal_stop()
        op.join(10)


def test_a_cancelled_call_is_skipped_and_without_a_run_a_call_runs_at_once():
    op = loop(epochs=2)
    op.start()
    op.signal_pause()
    assert op.wait_for_state_changed(10)
    ran = []
    with op._changed:  # hold the loop so the call cannot run before it is cancelled
        future = op.command("call", fn=lambda: ran.append(1))
        assert future.cancel()
    assert op.wait_for_state_changed(10) and ran == []
    op.signal_resume()
    op.join(30)
    thread, total, _ = op.command("call", fn=lambda: where(op.trainer)).result(timeout=0)
    assert thread is threading.current_thread() and total == op.trainer.total_iterations


def test_a_call_sent_as_the_run_ends_still_runs():
    op = loop(epochs=1)
    ran = threading.Event()
    op.start()
    op.command("call", fn=ran.set)
    op.join(30)
    assert ran.is_set()


def test_call_needs_a_function_argument():
    with pytest.raises(SigmaError, match=r"unknown command 'call' with arguments \[\]"):
        loop().command("call")

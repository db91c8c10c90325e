"""The progress bar's arithmetic on a fake clock (no 46/45, no 0 it/s, pauses not counted, a resumed epoch counts
what it trained), the loop's epoch reports it prints, the compile notice, and log lines kept off the bar."""

from __future__ import annotations

import io
import logging
import sys
import threading
from types import SimpleNamespace

from rich.console import Console

from sigma_core import Hook
from sigma_core import config as run_config
from sigmann_monitors.progress import COMPILING, ProgressHook
from sigma_core.training.loop import EpochReport, Loop, State
from sigma_core.run import build_run


class Clock:
    """A clock that moves only when told."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def progress(total=45, start=0, compiles=False):
    """A progress hook on a fake terminal and clock, over a fake trainer ``total`` iterations an epoch long."""
    clock = Clock()
    stream = io.StringIO()
    hook = ProgressHook(Console(file=stream, force_terminal=True, width=200, soft_wrap=True), clock=clock)
    trainer = SimpleNamespace(iteration=start, epoch=0, epoch_cost=0.0, training_iterator=range(total),
                              handler=SimpleNamespace(compiles_kernels=compiles))
    hook.attach(SimpleNamespace(trainer=trainer, epochs=3))
    return hook, trainer, clock, stream


def iterate(hook, trainer, clock, seconds):
    clock.now += seconds
    trainer.iteration += 1
    trainer.epoch_cost += 0.5
    hook.on_iteration()


def bar(hook):
    return hook._progress.tasks[0]


def test_a_fast_epoch_never_counts_past_its_length_nor_shows_zero_speed():
    hook, trainer, clock, stream = progress(total=45)
    try:
        for _ in range(45):  # the whole epoch inside one refresh interval
            iterate(hook, trainer, clock, 0.001)
            assert bar(hook).completed == trainer.iteration <= bar(hook).total == 45
        assert bar(hook).fields["speed"] == "…"  # not measured yet: not "0 it/s"
        hook.on_epoch(EpochReport(epoch=1, cost=0.5, seconds=0.045, iterations=45))
    finally:
        hook.detach()
    assert stream.getvalue().endswith("epoch 1/3  train cost 0.5000  45 it in 0.04s (1,000 it/s)\n")


def test_a_pause_stops_the_clock_for_speed_and_time_left():
    hook, trainer, clock, _ = progress(total=100)
    try:
        for _ in range(11):  # the first opens the bar; ten more at 0.1 s each: 10 it/s
            iterate(hook, trainer, clock, 0.1)
        assert (bar(hook).fields["speed"], bar(hook).fields["eta"]) == ("10", "0:00:09")  # 89 left at 10 it/s
        hook.on_pause()
        clock.now += 3600  # an hour paused
        hook.on_resume()
        iterate(hook, trainer, clock, 0.1)
        assert (bar(hook).completed, bar(hook).fields["speed"], bar(hook).fields["eta"]) == (12, "10", "0:00:09")
    finally:
        hook.detach()


def test_a_resumed_epoch_counts_the_iterations_it_trained():
    hook, trainer, clock, stream = progress(total=400, start=187)
    try:
        for _ in range(213):
            iterate(hook, trainer, clock, 0.01)
        assert (bar(hook).completed, bar(hook).total) == (400, 400)
        assert bar(hook).fields["speed"] == "100"  # 212 iterations since the bar opened, in 2.12 s
        hook.on_epoch(EpochReport(epoch=1, cost=0.5, seconds=2.13, iterations=400, trained=213))
    finally:
        hook.detach()
    assert stream.getvalue().endswith("213 it (resumed at 187 of 400) in 2.13s (100 it/s)\n")


def test_the_compile_notice_waits_while_paused():
    hook, trainer, clock, stream = progress(compiles=True)
    hook.on_start()
    hook.on_pause()  # a run that starts paused (the web page's paused=true) compiles nothing yet
    assert hook._timer is None and hook._status is None
    hook.on_resume()  # training starts: the first iteration may compile again
    assert hook._timer is not None
    hook._timer.cancel()
    hook._show_notice()  # what the timer does after a second of training without an iteration
    assert hook._status is not None
    iterate(hook, trainer, clock, 2.0)  # the first iteration ends: the notice goes
    assert hook._status is None and hook._timer is None
    hook.detach()
    assert COMPILING in stream.getvalue()


def test_log_lines_go_through_the_bar_console_while_it_is_attached(capsys):
    logger = logging.getLogger("sigma")
    plain = logging.StreamHandler(sys.stderr)
    logger.addHandler(plain)
    level = logger.level
    logger.setLevel(logging.INFO)
    hook, trainer, clock, stream = progress()
    try:
        iterate(hook, trainer, clock, 0.5)  # a bar is up
        logger.info("a line that must not glue onto the bar " + "x" * 150)
        assert plain not in logger.handlers
    finally:
        hook.detach()
        logger.removeHandler(plain)
        logger.setLevel(level)
    assert capsys.readouterr().err == ""  # not written past the console
    assert ("sigma: a line that must not glue onto the bar " + "x" * 150 + "\n") in stream.getvalue()  # whole
    assert plain not in logger.handlers and hook._logs is None


def test_the_loop_reports_what_a_resumed_epoch_trained_and_leaves_pauses_out(run_file, monkeypatch):
    run = build_run(run_config.load(run_file, []))  # blobs: 9 iterations an epoch
    run.trainer.initialise(run.handler)
    clock = Clock()
    monkeypatch.setattr("sigma_core.training.loop.time", SimpleNamespace(perf_counter=clock))

    class Tick(Hook):  # each iteration takes half a second; it stops, or pauses, at a step
        def __init__(self, command, at):
            self.command, self.at, self.paused = command, at, threading.Event()

        def on_iteration(self):
            clock.now += 0.5
            if self.run.values["total_iterations"] == self.at:
                self.run.command(self.command)

        def on_pause(self):
            self.paused.set()

    assert Loop(run.trainer, epochs=1, hooks=[Tick("stop", 4)]).run() == []  # stopped inside epoch 1: not reported
    tick = Tick("pause", 6)
    loop = Loop(run.trainer, epochs=1, hooks=[tick])
    loop.start()
    assert tick.paused.wait(30) and loop.wait_for_state_changed(30) and loop.state is State.PAUSED
    clock.now += 3600  # an hour paused
    loop.signal_resume()
    [report] = loop.join(30)
    assert (report.iterations, report.trained) == (9, 5)  # 4 trained before the stop
    assert report.seconds == 5 * 0.5  # the hour paused is not the epoch's time

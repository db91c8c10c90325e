"""The hook protocol and its dispatcher: events, schedules, the run's values, threads, failures, commands, run files."""

from __future__ import annotations

import json
import re
import sys
import threading
import time

import numpy
import pytest

from sigma_core import Hook, HookError, config as run_config, plugins
from sigma_core.cli import main
from sigma_core.errors import ConfigError, SigmaError, UnknownComponentError
from sigma_core.hooks.tables import parse_hook_option
from sigma_core.training.loop import Loop, State
from sigma_core.run import build_run


def _run(run_file, *overrides, **kwargs):
    return build_run(run_config.load(run_file, overrides), **kwargs)


def _loop(run, *hooks, epochs=2):
    run.trainer.initialise(run.handler)
    return Loop(run.trainer, epochs=epochs, hooks=hooks)


class Recorder(Hook):
    """Records every event it overrides, with the run values it reads then."""

    def __init__(self):
        self.events = []
        self.detached = False

    def on_start(self):
        self.events.append(("start", self.run.values["epoch"]))

    def on_iteration(self):
        self.events.append(("iteration", self.run.values["total_iterations"]))

    def on_epoch(self, report):
        self.events.append(("epoch", report.epoch, self.run.values["epoch"]))

    def on_stop(self):
        self.events.append(("stop",))

    def detach(self):
        self.detached = True


# -- events and schedules ----------------------------------------------------------------------------------------


def test_a_hook_sees_every_event_in_order_with_the_values_at_it(run_file):
    run = _run(run_file)
    recorder = Recorder()
    run.train([recorder])
    per_epoch = len(run.trainer.training_iterator)
    expected = [("start", 0)]
    for epoch in (1, 2):
        expected += [("iteration", (epoch - 1) * per_epoch + i) for i in range(1, per_epoch + 1)]
        expected.append(("epoch", epoch, epoch))
    assert recorder.events == [*expected, ("stop",)]
    assert recorder.detached  # when the run ended


def test_every_thins_iterations_or_epochs_and_events_a_hook_does_not_override_cost_nothing(run_file, monkeypatch):
    class Sampler(Hook):
        every = 4

        def __init__(self):
            self.steps = []

        def on_iteration(self):
            self.steps.append(self.run.values["total_iterations"])

    class EverySecondEpoch(Hook):
        every = [2, "epoch"]

        def __init__(self):
            self.seen = []

        def on_iteration(self):  # never: an epoch schedule leaves iterations out
            self.seen.append("iteration")

        def on_epoch(self, report):
            self.seen.append(report.epoch)

    called = []
    monkeypatch.setattr(Hook, "on_epoch", lambda self, report: called.append(self))  # the base's no-op, spied on
    run = _run(run_file, "training.epochs=4")
    sampler, second = Sampler(), EverySecondEpoch()
    run.train([sampler, second])
    assert sampler.steps == list(range(4, 37, 4)) and second.seen == [2, 4]
    assert called == []  # Sampler does not override on_epoch: it was never called


def test_hooks_run_in_order_then_in_the_order_given(run_file):
    seen = []

    class Named(Hook):
        def __init__(self, label, order=0):
            self.label, self.order = label, order

        def on_start(self):
            seen.append(self.label)

    run = _run(run_file, "training.epochs=1")
    run.train([Named("a"), Named("last", order=10), Named("first", order=-10), Named("b")])
    assert seen == ["first", "a", "b", "last"]


def test_a_bad_every_is_refused_naming_the_hook(run_file):
    class Odd(Hook):
        name, every = "odd", [2, "fortnight"]

    with pytest.raises(HookError, match="hook 'odd': every must be an integer >= 0 or"):
        _loop(_run(run_file), Odd())
    with pytest.raises(HookError, match="is not a hook"):
        _loop(_run(run_file), object())


# -- the run's values -----------------------------------------------------------------------------------------------


def test_values_are_flat_and_the_cost_is_read_from_the_device_only_when_a_hook_asks(run_file, monkeypatch):
    from sigma_core.training.trainer import Trainer

    reads = []
    cost = Trainer.last_cost
    monkeypatch.setattr(Trainer, "last_cost", property(lambda self: reads.append(1) or cost.fget(self), cost.fset))

    class Reader(Hook):
        every = 3

        def __init__(self):
            self.seen = {}

        def on_iteration(self):
            if self.run.values["total_iterations"] == 9:
                self.seen["iteration"] = dict(self.run.values)

        def on_epoch(self, report):
            self.seen["epoch"] = dict(self.run.values)

    run = _run(run_file, "training.epochs=1")
    run.train([Recorder()])  # reads epochs and iterations, never the cost
    assert reads == []
    reader = Reader()
    run = _run(run_file, "training.epochs=1")
    run.train([reader])
    iteration, epoch = reader.seen["iteration"], reader.seen["epoch"]
    assert {"time", "runtime", "epoch", "iteration", "total_iterations", "learning_rate", "cost",
            "network.layers.2-dense.weights", "network.layers.2-dense.biases"} == set(iteration)
    assert iteration["epoch"] == 0 and iteration["iteration"] == 9 and iteration["learning_rate"] == 0.1
    assert isinstance(iteration["network.layers.2-dense.weights"], numpy.ndarray)
    report = run.history[0]
    assert epoch["cost"] == report.cost and epoch["epoch"] == 1 and epoch["seconds"] == report.seconds
    assert epoch["validation.accuracy"] == report.validation["validation"]["accuracy"]
    assert "validation.records" not in epoch and "validation.top1" not in epoch  # top1 is the accuracy
    assert len(reads) == 1  # the one iteration that listed every value; the epoch's cost is its mean


def test_a_published_value_reaches_the_hooks_after_it_and_later_events(run_file):
    class Publisher(Hook):
        def on_epoch(self, report):
            self.run.publish("shared.answer", report.epoch * 10)

    class Reader(Hook):
        threaded = True

        def __init__(self):
            self.seen = []

        def on_epoch(self, report):
            self.seen.append(self.run.values["shared.answer"])

        def on_stop(self):
            self.seen.append(self.run.values["shared.answer"])

    reader = Reader()
    _run(run_file).train([reader, Publisher()])  # inline hooks run first: a threaded one sees what they published
    assert reader.seen == [10, 20, 20]

    class Clobber(Hook):
        def on_start(self):
            self.run.publish("cost", 0.0)

    with pytest.raises(HookError, match="cannot publish 'cost': it is one of the run's own values"):
        _run(run_file).train([Clobber()])


def test_asking_for_a_value_the_run_does_not_have_names_it(run_file):
    class Asker(Hook):
        def on_iteration(self):
            self.run.values["validation.acuracy"]

    with pytest.raises(HookError, match=r"no run value 'validation.acuracy' at on_iteration \(values: "):
        _run(run_file).train([Asker()])


# -- threads -----------------------------------------------------------------------------------------------------------


class Copier(Hook):
    """A threaded hook that keeps each event's values, checking it never runs on the training thread."""

    name, threaded = "copier", True
    reads = {"on_iteration": ("cost",), "on_epoch": ("network.layers.*.weights",)}

    def __init__(self):
        self.events, self.threads = [], set()

    def on_iteration(self):
        values = self.run.values
        self.events.append(("iteration", values["total_iterations"], values["cost"]))
        self.threads.add(threading.current_thread().name)

    def on_epoch(self, report):
        self.events.append(("epoch", report.epoch, self.run.values["epoch"],
                            self.run.values["network.layers.2-dense.weights"]))


def test_a_threaded_hook_gets_every_event_in_order_with_copies_taken_on_the_training_thread(run_file):
    copier, log = Copier(), []

    class Live(Hook):  # inline: what the training thread saw at the same events
        def on_iteration(self):
            log.append(("iteration", self.run.trainer.total_iterations, self.run.trainer.last_cost))

        def on_epoch(self, report):
            log.append(("epoch", report.epoch, self.run.values["epoch"],
                        self.run.trainer.network.parameters["2-dense.weights"].to_numpy()))

    _run(run_file).train([copier, Live()])
    assert copier.threads == {"sigma-hook-copier"}
    assert [event[:3] for event in copier.events] == [event[:3] for event in log] and len(log) == 20
    for mine, live in zip(copier.events[9::10], log[9::10]):  # the weights as they were after each epoch
        assert isinstance(mine[3], numpy.ndarray) and numpy.array_equal(mine[3], live[3])
    assert not numpy.array_equal(copier.events[9][3], copier.events[19][3])


def test_a_threaded_hook_may_not_touch_the_live_run_nor_read_what_it_did_not_ask_for(run_file, caplog):
    class Peeker(Hook):
        name, threaded = "peeker", True

        def on_epoch(self, report):
            self.run.trainer

    class Forgetful(Hook):
        name, threaded = "forgetful", True

        def on_iteration(self):
            self.run.values["cost"]

    peeker, forgetful = Peeker(), Forgetful()
    loop = _loop(_run(run_file), peeker, forgetful)
    assert len(loop.run()) == 2
    assert sorted(loop.dispatcher.failures) == [
        "hook 'forgetful' failed in on_iteration: ValueNotFound: hook 'forgetful' is threaded and 'cost' was not "
        "copied for it: name it in its reads, e.g. reads = {\"on_iteration\": ('cost',)}",
        "hook 'peeker' failed in on_epoch: HookError: hook 'peeker' is threaded: it reads run.values, not the live "
        "trainer (set up in attach(), which runs on the training thread)"]
    assert peeker not in loop.hooks and forgetful not in loop.hooks
    assert sum("failed in on_epoch" in r.getMessage() for r in caplog.records) == 1


def _blocked_hook(lossy: bool):
    """A threaded hook that sits in on_start until released, a gate that holds training until it is inside and lets
    it go once the run has queued everything: (blocked, gate)."""
    inside, release = threading.Event(), threading.Event()

    class Blocked(Hook):
        name, threaded, queue_size = "blocked", True, 4

        def __init__(self):
            self.got = []

        def on_start(self):
            inside.set()
            assert release.wait(30)

        def on_iteration(self):
            self.got.append(("iteration", self.run.values["total_iterations"]))

        def on_epoch(self, report):
            self.got.append(("epoch", report.epoch))

        def on_stop(self):
            self.got.append(("stop",))

    class Gate(Hook):  # inline, so before Blocked's events: holds training until Blocked is inside on_start, ...
        def on_iteration(self):
            if self.run.values["total_iterations"] == 1:
                assert inside.wait(30)

        def on_stop(self):  # ... and lets it go once everything has been queued (or dropped)
            self.iterations = self.run.trainer.total_iterations
            release.set()

    Blocked.lossy = lossy
    return Blocked(), Gate()


def test_a_blocked_lossy_hook_never_blocks_training_events_are_dropped_and_counted(run_file, caplog):
    """The hook sits in on_start for the whole run; the training thread queues and drops, never waits."""
    blocked, gate = _blocked_hook(lossy=True)
    _run(run_file).train([blocked, gate])
    assert gate.iterations == 18  # two epochs trained while the hook was stuck
    # A full queue drops its oldest iteration event: epochs and the stop always get through.
    assert blocked.got == [("epoch", 1), ("iteration", 18), ("epoch", 2), ("stop",)]
    assert blocked.dropped == 17
    assert any("hook 'blocked' could not keep up: 17 events dropped" in r.getMessage() for r in caplog.records)


def test_a_blocked_recording_hook_gets_every_event_in_order_through_a_spool_file_in_the_run_directory(run_file,
                                                                                                       tmp_path):
    """Not lossy (the default): past queue_size the events wait in a file in the run directory, not in memory, and
    the hook gets each of them, in order, once it is free; the file is gone at the end. (A loop built without a
    directory spools into a temporary file instead, rather than make one.)"""
    blocked, gate = _blocked_hook(lossy=False)
    spooled = []

    class Watch(Hook):  # inline, after the gate: sees the spool file while the hook is stuck
        def on_stop(self):
            spooled.extend(self.run.directory.glob("spool/blocked-*.pickle"))

    run = _run(run_file)
    run.directory = tmp_path / "version_0"
    run.train([blocked, gate, Watch()])
    assert gate.iterations == 18 and blocked.dropped == 0
    assert blocked.got == [*(("iteration", n) for n in range(1, 10)), ("epoch", 1),
                           *(("iteration", n) for n in range(10, 19)), ("epoch", 2), ("stop",)]
    assert len(spooled) == 1 and spooled[0].parent == run.directory / "spool"
    assert not spooled[0].exists()


def test_an_event_that_cannot_be_pickled_waits_in_memory_in_its_place(run_file):
    """A published value no file can hold (a lock): the event keeps its place in the queue, in memory."""
    blocked, gate = _blocked_hook(lossy=False)

    class Publisher(Hook):
        def on_iteration(self):
            self.run.publish("lock", threading.Lock() if self.run.values["total_iterations"] == 12 else 0)

    _run(run_file).train([Publisher(), blocked, gate])
    assert [event[1] for event in blocked.got if event[0] == "iteration"] == list(range(1, 19))


def test_a_hook_that_takes_a_second_per_event_does_not_hold_training_up(run_file, caplog):
    """Inline, its 20 events would take 20 s; threaded, the run is over long before its first event is.

    (The relative figure, well under 5 %, is measured by benchmarks/monitor_overhead.py: see BENCHMARKS.md.)
    """

    class Slow(Hook):
        name, threaded, drain_seconds = "slow", True, 0.05

        def on_iteration(self):
            time.sleep(1.0)

        def on_epoch(self, report):
            time.sleep(1.0)

    loop = _loop(_run(run_file), Slow())
    loop.run()
    assert loop.trainer.total_iterations == 18 and loop.seconds < 1.0
    assert any(re.fullmatch(r"hook 'slow' still busy 0.05 s after the run ended; (18|19) events left undelivered",
                            r.getMessage()) for r in caplog.records)


# -- failures -----------------------------------------------------------------------------------------------------------


def test_a_failing_hook_is_detached_and_reported_once_and_training_goes_on(run_file, caplog):
    class Broken(Hook):
        name = "broken"

        def __init__(self):
            self.detached = False

        def on_iteration(self):
            raise ValueError("disk on fire")

        def detach(self):
            self.detached = True

    broken, recorder = Broken(), Recorder()
    loop = _loop(_run(run_file), broken, recorder)
    assert len(loop.run()) == 2 and recorder.events[-1] == ("stop",)
    assert loop.dispatcher.failures == ["hook 'broken' failed in on_iteration: ValueError: disk on fire"]
    assert broken.detached and broken not in loop.hooks and recorder in loop.hooks
    assert sum("hook 'broken' failed" in r.getMessage() for r in caplog.records) == 1


def test_a_sigma_error_from_an_inline_hook_ends_the_run_with_its_message(run_file):
    class Refuses(Hook):
        def on_epoch(self, report):
            raise SigmaError("this run cannot go on")

    recorder = Recorder()
    with pytest.raises(SigmaError, match="this run cannot go on"):
        _run(run_file).train([Refuses(), recorder])
    assert recorder.detached and ("stop",) not in recorder.events


FAILING = """
    from sigma_core import Hook, SigmaError, hookimpl

    RAISES = {"value": lambda: ValueError("boom"), "exit": lambda: SystemExit(3),
              "interrupt": KeyboardInterrupt, "sigma": lambda: SigmaError("refused on purpose")}

    class Failing(Hook):
        \"\"\"Raises what ``raises`` names in ``at``: a constructor, attach, an event or detach.\"\"\"

        def __init__(self, at="on_iteration", raises="value", threaded=False):
            if at == "__init__":
                raise RAISES[raises]()
            self.at, self.raises, self.threaded = at, raises, threaded

        def fail(self, where):
            if where == self.at:
                raise RAISES[self.raises]()

        def attach(self, run):
            super().attach(run)
            self.fail("attach")

        def on_start(self):
            self.fail("on_start")

        def on_iteration(self):
            self.fail("on_iteration")

        def on_epoch(self, report):
            self.fail("on_epoch")

        def on_stop(self):
            self.fail("on_stop")

        def detach(self):
            self.fail("detach")

    @hookimpl
    def register_hooks(register):
        register("failing", Failing, description="fails where it is told to")
"""

WHY = {"value": "ValueError: boom",
       "exit": 'it called sys.exit(3); a hook ends a run with run.command("stop") or a SigmaError, never by ending '
               "the process",
       "interrupt": "KeyboardInterrupt raised by the hook itself (not Ctrl-C)"}


@pytest.fixture
def failing(fake_site, run_file, capsys):
    """``failing(at, raises, threaded)``: ``sigma train`` with the failing hook; its status, stdout and stderr lines."""
    fake_site.add("failing-plugin", entry_points={"failing": "failing_plugin_mod"},
                  modules={"failing_plugin_mod": FAILING})

    def train(at, raises, threaded=False):
        option = f"failing:at='{at}',raises='{raises}',threaded={str(threaded).lower()}"
        status = main(["train", str(run_file), "--quiet", "--monitor", option])
        out, err = capsys.readouterr()
        news = ("sigma: handler numpy", "sigma: run blobs:", "finished after training step ")  # what every run says
        return status, out, [line for line in err.strip().splitlines() if not line.startswith(news)]

    return train


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threaded"])
@pytest.mark.parametrize("raises", ["value", "exit", "interrupt"])
@pytest.mark.parametrize("at", ["attach", "on_start", "on_iteration", "on_epoch", "on_stop", "detach"])
def test_a_hook_failing_anywhere_by_any_exception_is_named_in_one_line_and_training_goes_on(failing, at, raises,
                                                                                              threaded):
    status, out, err = failing(at, raises, threaded)
    assert status == 0 and out.startswith("blobs: 2 epochs")  # the whole run, as without the hook
    then = "" if at == "detach" else "; detached, training goes on"
    assert err == [f"sigma: hook 'failing' failed in {at}: {WHY[raises]}{then}",
                   f"sigma: hook that failed and was detached: 'failing' ({at})"]  # named again at the end


def test_a_hook_that_cannot_be_built_is_refused_in_one_line_before_anything_trains(failing, run_file, capsys,
                                                                                    python_ctrl_c):
    assert failing("__init__", "value") == (2, "", ["error: --monitor[0]: hook 'failing': boom"])
    text = run_file.read_text()
    run_file.write_text(text + '[[hooks]]\ntype = "failing"\nat = "__init__"\nraises = "exit"\n')
    assert main(["train", str(run_file), "--quiet"]) == 2  # from a run file: its table named
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: hooks[0]: hook 'failing' failed in __init__: {WHY['exit']}"]
    run_file.write_text(text)
    assert failing("__init__", "exit") == (2, "", [f"error: --monitor[0]: hook 'failing' failed in __init__: "
                                                   f"{WHY['exit']}"])
    # Nothing tells a KeyboardInterrupt raised there from Ctrl-C while the run is built: it is taken for Ctrl-C.
    assert failing("__init__", "interrupt") == (130, "", ["interrupted"])


def test_a_sigma_error_ends_the_run_from_the_training_thread_and_detaches_a_threaded_hook(failing):
    for at in ("attach", "on_iteration", "on_stop"):
        assert failing(at, "sigma") == (2, "", ["error: refused on purpose"]), at
    status, out, err = failing("on_iteration", "sigma", threaded=True)
    assert status == 0 and out.startswith("blobs: 2 epochs")
    assert err == ["sigma: hook 'failing' failed in on_iteration: SigmaError: refused on purpose; detached, "
                   "training goes on", "sigma: hook that failed and was detached: 'failing' (on_iteration)"]


def test_ctrl_c_in_an_inline_hook_still_stops_a_loop_and_a_hooks_own_interrupt_off_the_main_thread_does_not(run_file,
                                                                                                       python_ctrl_c):
    """With Python's own Ctrl-C handler on the main thread, a KeyboardInterrupt may be the user's: it ends the run
    (every hook detached); where Ctrl-C cannot arrive, on a loop's own thread, it is the hook's failure."""
    import signal

    class CtrlC(Hook):
        name = "ctrl-c"

        def on_iteration(self):
            if self.run.values["total_iterations"] == 3:
                signal.raise_signal(signal.SIGINT)  # as a Ctrl-C arrives

    recorder = Recorder()
    loop = _loop(_run(run_file), CtrlC(), recorder)
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    assert loop.trainer.total_iterations == 3 and recorder.detached and loop.dispatcher.failures == []

    class Interrupts(Hook):
        name = "interrupts"

        def on_iteration(self):
            raise KeyboardInterrupt

    loop = _loop(_run(run_file), Interrupts())
    loop.start()
    assert len(loop.join(30)) == 2
    assert loop.dispatcher.failures == [f"hook 'interrupts' failed in on_iteration: {WHY['interrupt']}"]


def test_a_hook_detached_for_a_failure_is_reported_once_even_if_its_detach_fails_too(run_file, caplog):
    class Twice(Hook):
        name, threaded = "twice", True

        def on_epoch(self, report):
            raise OSError(28, "No space left on device")

        def detach(self):
            raise OSError(28, "No space left on device")

    loop = _loop(_run(run_file), Twice())
    loop.run()
    assert loop.dispatcher.failures == ["hook 'twice' failed in on_epoch: OSError: [Errno 28] No space left on device"]
    assert sum("twice" in record.getMessage() for record in caplog.records if record.levelname == "WARNING") == 1


@pytest.mark.parametrize("setting, value, rule", [
    ("queue_size", 0, "an integer >= 1"), ("queue_size", "64", "an integer >= 1"),
    ("share", 0, "a number in (0, 1]"), ("share", 1.5, "a number in (0, 1]"),
    ("drain_seconds", -1, "a number >= 0"), ("drain_seconds", float("nan"), "a number >= 0"),
    ("threaded", "yes", "true or false"), ("order", None, "a number"), ("reads", ["cost"], None)])
def test_threading_settings_out_of_range_are_refused_in_one_line_naming_the_hook(run_file, setting, value, rule):
    hook = Hook()
    hook.name = "odd"
    setattr(hook, setting, value)
    message = (f"hook 'odd': {setting} must be {rule}, got {value!r}" if rule else
               "hook 'odd': reads must be a dict of event method -> value names, got ['cost']")
    with pytest.raises(HookError, match=re.escape(message)):
        _loop(_run(run_file), hook)


def test_the_throttle_paces_only_the_events_whose_last_call_took_a_slice(run_file):
    """Pacing (a profile function on the hook's thread) doubles the cost of the hook's own Python: a light event
    runs without it from its second call on, one that took a slice of processor time keeps it."""

    class Mixed(Hook):
        name, threaded, share = "mixed", True, 0.05

        def __init__(self):
            self.paced = {"on_iteration": [], "on_epoch": []}

        def on_iteration(self):
            self.paced["on_iteration"].append(sys.getprofile() is not None)

        def on_epoch(self, report):
            self.paced["on_epoch"].append(sys.getprofile() is not None)
            cpu = time.thread_time()
            while time.thread_time() - cpu < 0.005:  # five slices of processor time
                len(str(cpu))

    if sys.getprofile() is not None:
        pytest.skip("a profiler has precedence over the throttle")
    mixed = Mixed()
    _run(run_file).train([mixed])
    assert mixed.paced["on_iteration"] == [True] + [False] * 17
    assert mixed.paced["on_epoch"] == [True, True]


def test_a_busy_threaded_hook_keeps_to_its_share_of_the_interpreter_while_training_runs(run_file):
    """A hook that computes for 0.5 s of wall-clock time gets about ``share`` of it as processor time while training
    runs (the throttle rests it), and all of it once the run has ended (benchmarks/monitor_overhead.py: ``busy``)."""

    class Busy(Hook):
        name, threaded, share = "busy", True, 0.05

        def __init__(self):
            self.used = []

        def busy(self):
            started, cpu = time.perf_counter(), time.thread_time()
            while time.perf_counter() - started < 0.5:
                len(str(started))  # Python work, with calls: what holds the interpreter lock
            self.used.append(time.thread_time() - cpu)

        def on_start(self):
            self.busy()

        def on_stop(self):
            self.busy()

    class Long(Hook):  # keeps training going until the busy hook is done with its start
        def on_epoch(self, report):
            if not busy.used and report.epoch >= self.run.epochs - 1:
                self.run.command("extend", epochs=1)

    busy = Busy()
    _run(run_file, "training.epochs=4").train([busy, Long()])
    during, after = busy.used
    # A slice of 1 ms of processor time, then a rest of 19 ms: 5 % (more on a loaded machine's coarse clocks).
    assert during < 0.5 * 0.2, during
    assert after > 2 * during  # draining: no rest (on a machine this test shares, still well above the share)


# -- commands -------------------------------------------------------------------------------------------------------


class Steerer(Hook):
    """Pauses after 3 iterations, then lets a controller thread step and resume it."""

    def __init__(self):
        self.paused = threading.Event()
        self.iterations = []

    def on_iteration(self):
        self.iterations.append(self.run.trainer.total_iterations)
        if self.run.trainer.total_iterations == 3:
            self.run.command("pause")

    def on_pause(self):
        self.paused.set()


def test_commands_from_another_thread_pause_step_set_and_resume(run_file):
    run = _run(run_file)
    steerer = Steerer()
    loop = _loop(run, steerer, epochs=1)
    loop.start()
    assert steerer.paused.wait(10)
    assert loop.wait_for_state_changed(10) and loop.state is State.PAUSED
    assert run.trainer.total_iterations == 3

    steerer.run.command("step")
    assert loop.wait_for_state_changed(10)
    assert (loop.state, run.trainer.total_iterations) == (State.PAUSED, 4)  # exactly one iteration
    steerer.run.command("step")
    assert loop.wait_for_state_changed(10)
    assert run.trainer.total_iterations == 5

    steerer.run.command("set", key="optimiser.learning_rate", value=0.025)
    assert loop.wait_for_state_changed(10)
    assert run.trainer.optimiser.learning_rate == 0.025  # applied by the paused training thread
    steerer.run.command("resume")
    loop.join(10)
    assert steerer.iterations == list(range(1, len(run.trainer.training_iterator) + 1))
    assert run.trainer.epoch == 1


def test_reset_and_stop_from_a_threaded_hook_are_applied(run_file):
    class ResetOnceThenStop(Hook):
        threaded = True

        def __init__(self):
            self.seen = []

        def on_epoch(self, report):  # epochs may end before a command lands: it is applied at the next boundary
            self.seen.append(("epoch", report.epoch))
            if len(self.seen) == 1:
                self.run.command("reset")
            elif ("reset", 0, 0) in self.seen and self.seen[-2][0] == "reset":
                self.run.command("stop")

        def on_reset(self):
            self.seen.append(("reset", self.run.values["epoch"], self.run.values["total_iterations"]))

    run = _run(run_file, "training.epochs=50")
    hook = ResetOnceThenStop()
    run.train([hook])
    reset = hook.seen.index(("reset", 0, 0))  # the trainer was back at epoch 0 ...
    assert hook.seen[reset + 1] == ("epoch", 1)  # ... and trained epoch 1 again
    assert len(hook.seen) < 50 and run.trainer.epoch < 50  # stopped


# -- built-in hooks ----------------------------------------------------------------------------------------------------


def test_stop_at_an_epoch_or_at_its_first_due_iteration(run_file):
    from sigmann_monitors.stoppers import StopTraining

    run = _run(run_file, "training.epochs=50")
    assert len(run.train([StopTraining(at_epoch=3)])["history"]) == 3 and run.trainer.epoch == 3
    run = _run(run_file, "training.epochs=50")
    summary = run.train([StopTraining(every=5)])
    assert summary["history"] == [] and run.trainer.total_iterations == 5


def test_early_stopping_after_patience(run_file):
    from sigmann_monitors.stoppers import EarlyStopping

    class Flat(Hook):  # a value that never improves after its first reading: stop after 1 + patience epochs
        def on_epoch(self, report):
            self.run.publish("flat", 1.0)

    run = _run(run_file, "training.epochs=50")
    assert len(run.train([Flat(), EarlyStopping("flat", patience=3)])["history"]) == 4


def test_nan_in_a_weight_stops_naming_the_parameter(run_file):
    from sigma_core.errors import NonFiniteError
    from sigmann_monitors.stoppers import StopOnNonFinite

    class Poison(Hook):
        def on_iteration(self):
            if self.run.values["total_iterations"] == 3:
                weights = self.run.network.parameters["2-dense.weights"]
                values = weights.to_numpy()
                values[1, 2] = numpy.nan
                weights.handler.fill(weights, weights.handler.asarray(values))

    run = _run(run_file, "training.epochs=5")
    with pytest.raises(NonFiniteError, match=r"parameter '2-dense.weights' holds nan at index \[1, 2\]"):
        run.train([Poison(), StopOnNonFinite()])
    assert run.trainer.total_iterations == 3


def test_learning_rate_schedules(run_file):
    from sigmann_monitors.schedules import CosineSchedule, ExponentialSchedule, StaircaseSchedule, WarmUp

    def rates(schedule, steps):
        schedule.base = 1.0
        return [schedule.rate(t) for t in range(steps)]

    assert rates(StaircaseSchedule(2, gamma=0.5), 5) == [1, 1, 0.5, 0.5, 0.25]
    assert rates(ExponentialSchedule(0.5), 3) == [1, 0.5, 0.25]
    assert rates(CosineSchedule(4), 6) == pytest.approx([1, 0.8535534, 0.5, 0.1464466, 0, 0])
    assert rates(WarmUp(4), 6) == [0, 0.25, 0.5, 0.75, 1, 1]

    with open(run_file, "a") as stream:
        stream.write('[[hooks]]\ntype = "exponential_schedule"\ngamma = 0.5\nper = "epoch"\n')
    run = _run(run_file)
    run.train()
    assert run.trainer.optimiser.learning_rate == pytest.approx(0.1 * 0.25)


def test_the_checkpoint_hook_keeps_the_best_epochs_by_a_run_value(run_file, tmp_path):
    from sigma_core.training.checkpoint import checkpoints, load_checkpoint

    class Scores(Hook):  # a score that peaks at epoch 2 of 4
        def on_epoch(self, report):
            self.run.publish("score", [0.5, 0.9, 0.7, 0.8][report.epoch - 1])

    saves = tmp_path / "best"
    with open(run_file, "a") as stream:
        stream.write(f'[[hooks]]\ntype = "checkpoint"\ndirectory = "{saves}"\nkeep = 5\nbest = "score"\n')
    run = _run(run_file, "training.epochs=4")
    run.train([Scores()])  # checkpoint's order puts it after the scores at each epoch
    saved = checkpoints(saves, "blobs")
    assert [load_checkpoint(path).trainer["epoch"] for path in saved] == [1, 2]


# -- run files and the command line ------------------------------------------------------------------------------------


def test_hook_option_parses_toml_values_and_keeps_lists():
    assert parse_hook_option("metrics") == {"type": "metrics"}
    assert parse_hook_option("web:port=8080,host='0.0.0.0',values=[\"a\", \"b\"],name=x") == {
        "type": "web", "port": 8080, "host": "0.0.0.0", "values": ["a", "b"], "name": "x"}
    with pytest.raises(ConfigError, match="not key=value"):
        parse_hook_option("metrics:every")


PLUGIN = """
    from sigma_core import Hook, hookimpl
    from sigma_core.training.loop import SingleWorker

    SEEN = []

    class EpochCounter(Hook):
        def __init__(self, label="x"):
            self.label = label

        def on_epoch(self, report):
            SEEN.append((self.name, self.label, report.epoch))

    class CountingWorker(SingleWorker):
        def __init__(self, trainer, *, note=0):
            super().__init__(trainer)
            SEEN.append(("operator", note))

    @hookimpl
    def register_hooks(register):
        register("epoch_counter", EpochCounter, description="counts epochs")

    @hookimpl
    def register_operators(register):
        register("counting", CountingWorker, description="the single worker, counted")
"""


def test_a_plugin_hook_is_picked_by_name_from_hooks_and_monitors_tables(fake_site, run_file):
    fake_site.add("watch-plugin", entry_points={"watch": "watch_plugin_mod"}, modules={"watch_plugin_mod": PLUGIN})
    with open(run_file, "a") as stream:
        stream.write('[operator]\ntype = "counting"\nnote = 1\n[[hooks]]\ntype = "epoch_counter"\nlabel = "a"\n'
                     '[[monitors]]\ntype = "epoch_counter"\nlabel = "b"\n')
    summary = _run(run_file).train()
    import watch_plugin_mod

    assert watch_plugin_mod.SEEN == [("operator", 1), ("epoch_counter", "a", 1), ("epoch_counter", "b", 1),
                                     ("epoch_counter", "a", 2), ("epoch_counter", "b", 2)]
    assert summary["epochs"] == 2
    assert plugins.get("hook", "epoch_counter").distribution == "watch-plugin"


def test_a_plugin_still_registering_monitors_is_told_in_one_line(fake_site):
    fake_site.add("old-plugin", entry_points={"old": "old_plugin_mod"}, modules={"old_plugin_mod": """
        from sigma_core import hookimpl

        @hookimpl
        def register_monitors(register):
            register("old", object)
    """})
    assert [failure.error for failure in plugins.failures()] == [
        "PluginError: register_monitors is gone: monitors are hooks now; register them with register_hooks "
        "(sigma_core.Hook)"]


def test_plugins_json_lists_the_built_in_hooks_with_their_distribution(capsys):
    assert main(["plugins", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed if isinstance(listed, list) else listed["components"]
    kinds = {(row["kind"], row["name"]): row["distribution"] for row in rows}
    assert kinds[("hook", "checkpoint")] == kinds[("hook", "epoch_lines")] == "sigmann"
    assert kinds[("hook", "progress")] == kinds[("hook", "metrics")] == "sigmann-monitors"
    assert not any(kind == "monitor" for kind, _ in kinds)


def test_bad_hook_tables_name_the_key(run_file):
    text = run_file.read_text()
    run_file.write_text(text + '[[monitors]]\ntype = "progress"\ncolour = "red"\n')
    with pytest.raises(ConfigError, match=r"monitors\[0\].*colour.*progress"):
        _run(run_file)
    run_file.write_text(text + '[[hooks]]\ntype = "checkpoint"\non = { extrema = "x" }\n')
    with pytest.raises(ConfigError, match=r"hooks\[0\].on: hook 'checkpoint' does not take 'on': criteria gate "
                                          r"sigmann-criteria's hooks; the checkpoint hook keeps the best epochs itself"):
        _run(run_file)
    run_file.write_text(text + '[[hooks]]\ntype = "stop"\nevery = [1, "fortnight"]\n')
    with pytest.raises(ConfigError, match=r"hooks\[0\].every: hook 'stop': every must be"):
        _run(run_file)
    run_file.write_text(text + '[[hooks]]\ntype = "stop"\nat_epcoh = 3\n')
    with pytest.raises(ConfigError, match=r"unknown key hooks\[0\].at_epcoh for hook 'stop'; allowed: at_epoch, every"):
        _run(run_file)
    run_file.write_text(text + '[[hooks]]\ntype = "value_reportr"\n')
    with pytest.raises(UnknownComponentError, match="unknown hook 'value_reportr'"):
        _run(run_file)


def test_cli_monitor_option_and_quiet(run_file, capsys):
    assert main(["train", str(run_file), "--monitor", "progress", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "epoch 2/2" in err  # --monitor progress wins over --quiet's default
    assert main(["train", str(run_file), "--hook", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: unknown hook 'nosuch'")


def test_quiet_hides_the_progress_lines_but_not_a_hook_failure(run_file, tmp_path, capsys):
    (tmp_path / "taken").write_text("a file where the metrics directory should go")
    assert main(["train", str(run_file), "--quiet", "--monitor", f"metrics:directory='{tmp_path / 'taken'}'"]) == 0
    err = capsys.readouterr().err
    assert "epoch 1/2" not in err
    assert "hook 'metrics' failed in on_start: " in err and "detached, training goes on" in err


# -- the progress hook --------------------------------------------------------------------------------------------------


def _progress_run(run_file, terminal: bool, compiles: bool, first_iteration_seconds: float = 0.0):
    """Train with a progress hook drawing into a string; returns what it drew."""
    import io

    from rich.console import Console

    from sigmann_monitors.progress import ProgressHook

    class SlowFirstStep(Hook):  # before the progress hook: a first iteration that takes a while
        order = -1

        def on_iteration(self):
            if self.run.values["total_iterations"] == 1:
                time.sleep(first_iteration_seconds)

    stream = io.StringIO()
    run = _run(run_file)
    run.trainer.initialise(run.handler)
    run.handler.compiles_kernels = compiles
    console = Console(file=stream, force_terminal=terminal, width=150)
    run.train([SlowFirstStep(), ProgressHook(console=console)])
    return stream.getvalue(), run


def test_progress_lines_label_training_and_validation_and_pipes_get_plain_lines(run_file):
    out, run = _progress_run(run_file, terminal=False, compiles=False)
    lines = out.splitlines()
    assert len(lines) == 2 and "\x1b" not in out  # no bars, no colour codes
    for line, report in zip(lines, run.history):
        held_out = report.validation["validation"]
        assert line == (f"epoch {report.epoch}/2  train cost {report.cost:.4f}  validation accuracy "
                        f"{held_out['accuracy']:.2%} cost {held_out['cost']:.4f}  9 it in {report.seconds:.2f}s "
                        f"({9 / report.seconds:,.0f} it/s)")


def test_progress_bars_on_a_terminal_show_cost_rate_and_eta(run_file):
    out, _ = _progress_run(run_file, terminal=True, compiles=False)
    assert "train cost" in out and "it/s  eta" in out and "epoch 2/2  train cost" in out


@pytest.mark.parametrize("terminal", [False, True])
def test_a_slow_first_iteration_on_a_compiling_handler_says_why(run_file, terminal):
    out, _ = _progress_run(run_file, terminal=terminal, compiles=True, first_iteration_seconds=1.3)
    assert "compiling kernels (first run only)…" in out
    if not terminal:
        assert out.splitlines()[0] == "compiling kernels (first run only)…"
    quick, _ = _progress_run(run_file, terminal=terminal, compiles=True)  # a cached kernel: no notice
    assert "compiling" not in quick
    other, _ = _progress_run(run_file, terminal=terminal, compiles=False, first_iteration_seconds=1.3)
    assert "compiling" not in other  # a slow step on a handler that compiles nothing is just slow

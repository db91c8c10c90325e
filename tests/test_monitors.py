"""Monitors and operators as plugin kinds: events, the registry, commands, run files and --monitor."""

from __future__ import annotations

import json
import re
import threading

import numpy
import pytest

from sigma_core import config as run_config
from sigma_core import plugins
from sigma_core.cli import main
from sigma_core.errors import ConfigError, SigmaError, UnknownComponentError
from sigma_core.monitors import Monitor, MonitorError, parse_monitor_option
from sigma_core.operators import SingleWorkerOperator, State
from sigma_core.run import build_run

def _run(run_file, *overrides, **kwargs):
    return build_run(run_config.load(run_file, overrides), **kwargs)


class Recorder(Monitor):
    """Records every event, and the registry's epoch and cost when it sees them."""

    def __init__(self):
        super().__init__()
        self.events = []

    def on_start(self):
        self.events.append(("start", self.registry["epoch"]))

    def on_iteration(self):
        self.events.append(("iteration", self.registry["total_iterations"]))

    def on_epoch(self, report):
        self.events.append(("epoch", report.epoch, self.registry["epoch"]))

    def on_stop(self):
        self.events.append(("stop",))


def test_a_monitor_sees_every_event_in_order_with_a_fresh_registry(run_file):
    run = _run(run_file)
    recorder = Recorder()
    run.train([recorder])
    per_epoch = len(run.trainer.training_iterator)
    expected = [("start", 0)]
    for epoch in (1, 2):
        expected += [("iteration", (epoch - 1) * per_epoch + i) for i in range(1, per_epoch + 1)]
        expected.append(("epoch", epoch, epoch))
    assert recorder.events == [*expected, ("stop",)]
    assert recorder.operator is None  # detached when the run ended


def test_a_monitor_gets_only_the_events_it_overrides_and_iterations_every_n(run_file):
    class Sampler(Monitor):
        every = 4

        def on_iteration(self):
            assert self.operator._listeners["on_epoch"] == []  # nobody overrides on_epoch: no epoch events
            self.steps.append(self.values["total_iterations"])

    run = _run(run_file)
    sampler = Sampler()
    sampler.steps = []
    run.train([sampler])
    total = run.trainer.total_iterations
    assert total == 18 and sampler.steps == list(range(4, total + 1, 4))


class Steerer(Monitor):
    """Pauses after 3 iterations, then lets a controller thread step and resume it."""

    def __init__(self):
        super().__init__()
        self.paused = threading.Event()
        self.iterations = []

    def on_iteration(self):
        self.iterations.append(self.trainer.total_iterations)
        if self.trainer.total_iterations == 3:
            self.command("pause")

    def on_pause(self):
        self.paused.set()


def test_commands_from_another_thread_pause_step_set_and_resume(run_file):
    run = _run(run_file)
    run.trainer.initialise(run.handler)
    steerer = Steerer()
    operator = SingleWorkerOperator(run.trainer, epochs=1, monitors=[steerer])
    operator.start()
    assert steerer.paused.wait(10)
    assert operator.wait_for_state_changed(10) and operator.state is State.PAUSED
    assert run.trainer.total_iterations == 3

    steerer.command("step")
    assert operator.wait_for_state_changed(10)
    assert (operator.state, run.trainer.total_iterations) == (State.PAUSED, 4)  # exactly one iteration
    steerer.command("step")
    assert operator.wait_for_state_changed(10)
    assert run.trainer.total_iterations == 5

    steerer.command("set", key="optimiser.learning_rate", value=0.025)
    assert operator.wait_for_state_changed(10)
    assert run.trainer.optimiser.learning_rate == 0.025  # applied by the paused training thread
    steerer.command("resume")
    operator.join(10)
    assert steerer.iterations == list(range(1, len(run.trainer.training_iterator) + 1))
    assert run.trainer.epoch == 1


def test_reset_and_stop_from_a_threaded_monitor_are_applied_and_logged(run_file, caplog):
    class ResetOnceThenStop(Monitor):
        threaded = True

        def __init__(self):
            super().__init__()
            self.seen = []

        def on_epoch(self, report):  # epochs may end before a command lands: it is applied at the next boundary
            self.seen.append(("epoch", report.epoch))
            if len(self.seen) == 1:
                self.command("reset")
            elif ("reset", 0, 0) in self.seen and self.seen[-2][0] == "reset":
                self.command("stop")

        def on_reset(self):
            self.seen.append(("reset", self.values["epoch"], self.values["total_iterations"]))

    caplog.set_level("INFO", logger="sigma")
    run = _run(run_file, "training.epochs=50")
    monitor = ResetOnceThenStop()
    run.train([monitor])
    reset = monitor.seen.index(("reset", 0, 0))  # the trainer was back at epoch 0 ...
    assert monitor.seen[reset + 1] == ("epoch", 1)  # ... and trained epoch 1 again
    assert len(monitor.seen) < 50 and run.trainer.epoch < 50  # stopped
    commands = [r.getMessage() for r in caplog.records if "command" in r.getMessage()]
    assert commands[:2] == ["operator of trainer blobs: command reset", "operator of trainer blobs: command stop"]


def test_bad_commands_are_one_line_errors(run_file):
    run = _run(run_file)
    run.trainer.initialise(run.handler)
    operator = SingleWorkerOperator(run.trainer, epochs=1)
    with pytest.raises(SigmaError, match="not paused"):
        operator.command("step")
    with pytest.raises(SigmaError, match="cannot set 'optimiser.momentum'.*optimiser.learning_rate"):
        operator.command("set", key="optimiser.momentum", value=0.9)
    with pytest.raises(SigmaError, match="finite number"):
        operator.command("set", key="optimiser.learning_rate", value=float("nan"))
    with pytest.raises(SigmaError, match=r"set: optimiser.learning_rate: expected a finite number >= 0, got -0.1"):
        operator.command("set", key="optimiser.learning_rate", value=-0.1)  # the run file's rule, not just "a number"
    with pytest.raises(SigmaError, match="unknown command 'jump'"):
        operator.command("jump")
    operator.command("set", key="optimiser.learning_rate", value=0.5)  # no run: applied at once
    assert run.trainer.optimiser.learning_rate == 0.5


def test_a_failing_monitor_is_detached_and_reported_once_and_training_goes_on(run_file, caplog):
    class Broken(Monitor):
        name = "broken"

        def on_iteration(self):
            raise ValueError("disk on fire")

    run = _run(run_file)
    broken, recorder = Broken(), Recorder()
    run.trainer.initialise(run.handler)
    operator = SingleWorkerOperator(run.trainer, epochs=2, monitors=[broken, recorder])
    reports = operator.run()
    assert len(reports) == 2 and recorder.events[-1] == ("stop",)
    assert operator.monitor_failures == ["monitor 'broken' failed in on_iteration: ValueError: disk on fire"]
    assert broken.operator is None and broken not in operator.monitors
    assert sum("monitor 'broken' failed" in r.getMessage() for r in caplog.records) == 1


class Copier(Monitor):
    """A threaded monitor that keeps each event's values, checking it never runs on the training thread."""

    threaded = True
    reads = {"on_epoch": ("network.layers.*<dense>.weights",)}

    def __init__(self):
        super().__init__()
        self.events, self.threads = [], set()

    def on_iteration(self):
        self.events.append(("iteration", self.values["total_iterations"], self.values["optimiser.cost_total"]))
        self.threads.add(threading.current_thread().name)

    def on_epoch(self, report):
        self.events.append(("epoch", report.epoch, self.values["epoch"], self.read["network.layers.2-dense.weights"]))


def test_a_threaded_monitor_gets_every_event_in_order_with_copies_taken_on_the_training_thread(run_file):
    run = _run(run_file)
    copier, log = Copier(), []

    class Live(Monitor):  # inline: what the training thread saw at the same events
        def on_iteration(self):
            log.append(("iteration", self.trainer.total_iterations, self.trainer.last_cost))

        def on_epoch(self, report):
            log.append(("epoch", report.epoch, self.registry["epoch"],
                        numpy.array(self.registry["network"]["layers"]["2-dense"]["weights"])))

    run.train([copier, Live()])
    assert copier.threads == {"sigma-monitor-monitor"} and copier.operator is None
    assert [event[:3] for event in copier.events] == [event[:3] for event in log] and len(log) == 20
    for mine, live in zip(copier.events[9::10], log[9::10]):  # the weights as they were after each epoch
        assert isinstance(mine[3], numpy.ndarray) and numpy.array_equal(mine[3], live[3])
    assert not numpy.array_equal(copier.events[9][3], copier.events[19][3])


def test_a_threaded_monitor_may_not_read_the_live_registry_and_its_failure_is_reported_once(run_file, caplog):
    class Peeker(Monitor):
        threaded = True

        def on_epoch(self, report):
            self.registry["epoch"]

    run = _run(run_file)
    run.trainer.initialise(run.handler)
    peeker = Peeker()
    operator = SingleWorkerOperator(run.trainer, epochs=2, monitors=[peeker])
    assert len(operator.run()) == 2
    assert operator.monitor_failures == ["monitor 'monitor' failed in on_epoch: MonitorError: monitor 'monitor' is "
                                         "threaded: read self.values (and name registry keys in reads), not the "
                                         "live registry"]
    assert peeker not in operator.monitors and peeker.operator is None
    assert sum("failed in on_epoch" in r.getMessage() for r in caplog.records) == 1


def test_a_blocked_monitor_never_blocks_training_events_are_dropped_and_counted(run_file, caplog):
    """The monitor sits in on_start for the whole run; the training thread queues and drops, never waits."""
    inside, release = threading.Event(), threading.Event()

    class Blocked(Monitor):
        name, threaded, queue_size = "blocked", True, 4

        def __init__(self):
            super().__init__()
            self.got = []

        def on_start(self):
            inside.set()
            assert release.wait(30)

        def on_iteration(self):
            self.got.append(("iteration", self.values["total_iterations"]))

        def on_epoch(self, report):
            self.got.append(("epoch", report.epoch))

        def on_stop(self):
            self.got.append(("stop",))

    class Gate(Monitor):  # inline, after Blocked: holds training until Blocked is inside on_start, ...
        def on_start(self):
            assert inside.wait(30)

        def on_stop(self):  # ... and lets it go once everything has been queued (or dropped)
            self.iterations = self.trainer.total_iterations
            release.set()

    run = _run(run_file)
    blocked, gate = Blocked(), Gate()
    run.train([blocked, gate])
    assert gate.iterations == 18  # two epochs trained while the monitor was stuck
    # A full queue drops its oldest iteration event: epochs and the stop always get through.
    assert blocked.got == [("epoch", 1), ("iteration", 18), ("epoch", 2), ("stop",)]
    assert blocked.dropped == 17
    assert any("monitor 'blocked' could not keep up: 17 events dropped" in r.getMessage() for r in caplog.records)


def test_a_monitor_that_takes_a_second_per_event_does_not_hold_training_up(run_file, caplog):
    """Inline, its 21 events would take 21 s; threaded, the run is over long before its first event is.

    (The relative figure, well under 5 %, is measured by benchmarks/monitor_overhead.py: see BENCHMARKS.md.)
    """
    import time

    class Slow(Monitor):
        name, threaded, drain_seconds = "slow", True, 0.05

        def on_iteration(self):
            time.sleep(1.0)

        def on_epoch(self, report):
            time.sleep(1.0)

    run = _run(run_file)
    run.trainer.initialise(run.handler)
    operator = SingleWorkerOperator(run.trainer, epochs=2, monitors=[Slow()])
    operator.run()
    assert run.trainer.total_iterations == 18 and operator.seconds < 1.0
    assert any(re.fullmatch(r"monitor 'slow' still busy 0.05 s after the run ended; (19|20) events left undelivered",
                            r.getMessage()) for r in caplog.records)


def test_commands_from_a_threaded_monitor_reach_the_training_thread(run_file):
    class StopAfterFirstEpoch(Monitor):
        threaded = True

        def on_epoch(self, report):
            self.command("stop")

    run = _run(run_file, "training.epochs=50")
    summary = run.train([StopAfterFirstEpoch()])
    assert 1 <= summary["epochs"] < 50  # the stop lands at the next iteration boundary after epoch 1


def test_monitor_option_parses_toml_values_and_keeps_lists():
    assert parse_monitor_option("metrics") == {"type": "metrics"}
    assert parse_monitor_option("web:port=8080,host='0.0.0.0',values=[\"a\", \"b\"],name=x") == {
        "type": "web", "port": 8080, "host": "0.0.0.0", "values": ["a", "b"], "name": "x"}
    with pytest.raises(MonitorError, match="not key=value"):
        parse_monitor_option("metrics:every")


PLUGIN = """
    from sigma_core.hookspecs import hookimpl
    from sigma_core.monitors import Monitor
    from sigma_core.operators import SingleWorkerOperator

    SEEN = []

    class EpochCounter(Monitor):
        def __init__(self, label="x"):
            super().__init__()
            self.label = label

        def on_epoch(self, report):
            SEEN.append((self.name, self.label, report.epoch))

    class CountingOperator(SingleWorkerOperator):
        def __init__(self, trainer, *, epochs, hooks=(), monitors=(), extra_epochs=0):
            super().__init__(trainer, epochs=epochs + extra_epochs, hooks=hooks, monitors=monitors)
            SEEN.append(("operator", extra_epochs))

    @hookimpl
    def register_monitors(register):
        register("epoch_counter", EpochCounter, description="counts epochs")

    @hookimpl
    def register_operators(register):
        register("counting", CountingOperator, description="trains extra epochs")
"""


def test_a_plugin_monitor_and_operator_are_picked_by_name_from_a_run_file(fake_site, run_file):
    fake_site.add("watch-plugin", entry_points={"watch": "watch_plugin_mod"}, modules={"watch_plugin_mod": PLUGIN})
    with open(run_file, "a") as stream:
        stream.write('[operator]\ntype = "counting"\nextra_epochs = 1\n[[monitors]]\ntype = "epoch_counter"\nlabel = "a"\n')
    run = _run(run_file)
    summary = run.train()
    import watch_plugin_mod

    assert watch_plugin_mod.SEEN == [("operator", 1), ("epoch_counter", "a", 1), ("epoch_counter", "a", 2),
                                     ("epoch_counter", "a", 3)]
    assert summary["epochs"] == 3
    assert plugins.get("monitor", "epoch_counter").distribution == "watch-plugin"
    assert plugins.get("operator", "counting").distribution == "watch-plugin"


def test_plugins_json_lists_operators_and_monitors_with_their_distribution(capsys):
    assert main(["plugins", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed if isinstance(listed, list) else listed["components"]
    kinds = {(row["kind"], row["name"]): row["distribution"] for row in rows}
    assert kinds[("operator", "single_worker")] == "sigmann"
    assert kinds[("monitor", "progress")] == kinds[("monitor", "metrics")] == "sigmann"


def test_bad_monitor_and_operator_tables_name_the_key(run_file):
    with open(run_file, "a") as stream:
        stream.write('[[monitors]]\ntype = "progress"\ncolour = "red"\n')
    with pytest.raises(ConfigError, match=r"monitors\[0\].*colour.*progress"):
        _run(run_file)
    run_file.write_text(run_file.read_text().split("[[monitors]]")[0])
    with pytest.raises(UnknownComponentError, match="unknown operator 'nosuch'"):
        _run(run_file, 'operator.type="nosuch"')


def test_cli_monitor_option_and_quiet(run_file, capsys):
    assert main(["train", str(run_file), "--monitor", "progress", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "epoch 2/2" in err  # --monitor progress wins over --quiet's default
    assert main(["train", str(run_file), "--monitor", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: unknown monitor 'nosuch'")


def _progress_run(run_file, terminal: bool, compiles: bool, first_iteration_seconds: float = 0.0):
    """Train with a progress monitor drawing into a string; returns what it drew."""
    import io
    import time

    from rich.console import Console

    from sigma_core.progress import ProgressMonitor

    class SlowFirstStep(Monitor):  # inline, before the progress monitor: a first iteration that takes a while
        def on_iteration(self):
            if self.trainer.total_iterations == 1:
                time.sleep(first_iteration_seconds)

    stream = io.StringIO()
    run = _run(run_file)
    run.trainer.initialise(run.handler)
    run.handler.compiles_kernels = compiles
    console = Console(file=stream, force_terminal=terminal, width=150)
    run.train([SlowFirstStep(), ProgressMonitor(console=console)])
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


def test_quiet_hides_the_progress_lines_but_not_a_monitor_failure(run_file, tmp_path, capsys):
    (tmp_path / "taken").write_text("a file where the metrics directory should go")
    assert main(["train", str(run_file), "--quiet", "--monitor", f"metrics:directory='{tmp_path / 'taken'}'"]) == 0
    err = capsys.readouterr().err
    assert "epoch 1/2" not in err
    assert "monitor 'metrics' failed in on_start: FileExistsError" in err

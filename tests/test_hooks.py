"""Hooks: time steps, criteria, dependency handling, built-in hooks and [[hooks]] in run files."""

from __future__ import annotations

import gzip
import logging
import struct
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sigma_core import config as run_config
from sigma_core.cli import main
from sigma_core.errors import ConfigError, NonFiniteError, UnknownComponentError
from sigma_core.hooks import Extrema, External, Hook, HookError, Threshold, after, every
from sigma_core.hooks.base import close_over_dependencies, invocation_order
from sigma_core.hooks.schedules import CosineSchedule, ExponentialSchedule, StepSchedule, WarmUp
from sigma_core.hooks.stoppers import EarlyStopping, StopOnNonFinite, StopTraining
from sigma_core.operators import SingleWorkerOperator
from sigma_core.registry import RegistryResolver, registry_from_dict
from sigma_core.run import build_run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def iris_run(epochs=3, hooks=(), **sections):
    raw = tomllib.loads((EXAMPLES / "iris.toml").read_text())
    raw["training"]["epochs"] = epochs
    raw["hooks"] = list(hooks)
    raw.update(sections)
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    return run


def operator_for(run, *hooks):
    return SingleWorkerOperator(run.trainer, epochs=run.epochs, hooks=hooks)


class Recorder(Hook):
    """Records (label, epoch, iteration, thread) each time it fires."""

    def __init__(self, label, step, log, requires=(), priority=0):
        super().__init__(step, parameters={"label": label}, requires=requires)
        self.label, self.log = label, log
        self.priority = priority

    def invoke(self, registry, resolver):
        self.log.append((self.label, registry.get("epoch"), registry.get("iteration"), threading.current_thread()))


# --- time steps -----------------------------------------------------------


def fired(step, events):
    countdown = step.countdown()
    return [i for i in range(1, events + 1) if countdown.tick()]


def test_time_steps_fire_on_intervals_and_live_time():
    assert fired(every(3, "iteration"), 10) == [3, 6, 9]
    assert fired(every(2, "epoch", live=2), 10) == [2, 4]
    assert fired(after(4, "iteration"), 10) == [4]
    with pytest.raises(ConfigError, match="interval"):
        every(0)
    with pytest.raises(ConfigError, match="time scale"):
        every(1, "fortnight")


def test_operator_fires_iteration_epoch_start_and_stop_hooks():
    run = iris_run(epochs=2)
    batches = len(run.trainer.training_iterator)
    log = []
    hooks = [Recorder(scale, every(1, scale), log) for scale in ("start", "iteration", "epoch", "stop")]
    operator_for(run, *hooks).run()
    labels = [entry[0] for entry in log]
    assert labels[0] == "start" and labels[-1] == "stop"
    assert labels.count("iteration") == 2 * batches and labels.count("epoch") == 2
    assert [e[1] for e in log if e[0] == "epoch"] == [1, 2]


# --- criteria -----------------------------------------------------------


def checks(criteria, values, key="x"):
    registry = registry_from_dict({key: 0.0})
    resolver = RegistryResolver(registry)
    results = []
    for value in values:
        registry[key] = float(value)
        results.append(criteria.check(resolver))
    return results


def test_threshold_continuous_and_rising_edge():
    assert checks(Threshold("x", ">", 2), [1, 3, 4, 1, 5]) == [False, True, True, False, True]
    assert checks(Threshold("x", ">", 2, rising_edge=True), [1, 3, 4, 1, 5]) == [False, True, False, False, True]
    assert checks(Threshold("x", "==", 1), [1, 2]) == [True, False]


def test_extrema_fires_on_first_and_new_extrema():
    assert checks(Extrema("x", "min"), [5, 6, 4, 4, 3]) == [True, False, True, False, True]
    assert checks(Extrema("x", "max"), [1, 2, 0, 3]) == [True, True, False, True]


def test_repeated_with_and_without_interruption():
    values = [3, 3, 0, 3, 3, 3]  # passes, passes, miss, passes x3
    assert checks(Threshold("x", ">", 1).repeated(2), values) == [False, True, False, False, True, False]
    assert checks(Threshold("x", ">", 1).repeated(2, without_interruption=True), values) == [
        False, True, False, False, True, False]
    assert checks(Threshold("x", ">", 1).repeated(3, without_interruption=True), [3, 3, 0, 3, 3, 3]) == [
        False, False, False, False, False, True]
    assert checks(Threshold("x", ">", 1).repeated(3), [3, 3, 0, 3]) == [False, False, False, True]


def test_and_or_not_and_external():
    assert checks(Threshold("x", ">", 1) & Threshold("x", "<", 5), [0, 3, 6]) == [False, True, False]
    assert checks(Threshold("x", "<", 1) | Threshold("x", ">", 5), [0, 3, 6]) == [True, False, True]
    assert checks(~Threshold("x", ">", 1), [0, 3]) == [True, False]
    toggle = External()
    assert checks(toggle, [0]) == [False]
    toggle.toggle()
    assert checks(toggle, [0, 0]) == [True, True]
    toggle.set(False)
    toggle.pulse()
    assert checks(toggle, [0, 0]) == [True, False]


def test_criteria_gate_a_hook():
    run = iris_run(epochs=3)
    log = []
    hook = Recorder("gated", every(1, "epoch"), log).on(Threshold("epoch", ">=", 2))
    operator_for(run, hook).run()
    assert [e[1] for e in log] == [2, 3]


# --- dependencies, priority, background ---------------------------------------


def test_priority_orders_hooks_and_requirements_run_first():
    log = []
    late = Recorder("late", every(1, "epoch"), log, priority=5)
    early = Recorder("early", every(1, "epoch"), log, priority=-5)
    dependency = Recorder("dependency", every(1, "epoch"), log, priority=100)
    early.require_hook(dependency)
    run = iris_run(epochs=1)
    operator = operator_for(run, late, early)
    assert dependency in operator.hooks  # attached automatically
    operator.run()
    assert [e[0] for e in log] == ["dependency", "early", "late"]


def test_cycle_is_rejected_naming_the_hooks():
    log = []
    a, b = Recorder("a", every(1), log), Recorder("b", every(1), log)
    a.require_hook(b)
    b.require_hook(a)
    with pytest.raises(HookError, match=r"cycle: Recorder\(label='a'.*Recorder\(label='b'.*Recorder\(label='a'"):
        close_over_dependencies([a])


def test_functionally_equal_hook_is_not_attached_twice():
    log = []
    first, twin = Recorder("x", every(2), log), Recorder("x", every(2), log)
    other = Recorder("x", every(3), log)
    assert first.functionally_equals(twin) and not first.functionally_equals(other)
    run = iris_run(epochs=1)
    operator = operator_for(run, first)
    assert operator.attach_hook(twin, other) == [other]
    # a dependency equal to an attached hook is reused, not attached again
    dependent = Recorder("dependent", every(2), log)
    dependent.require_hook(Recorder("x", every(2), log))
    assert operator.attach_hook(dependent) == [dependent] and dependent.required_hooks[0] is first


def test_background_hook_gets_only_its_entries_off_the_training_thread():
    seen = []

    class Peek(Hook):
        def invoke(self, registry, resolver):
            seen.append((sorted(registry), sorted(registry["optimiser"]), threading.current_thread(),
                         type(registry["network"]["layers"]["2-dense"]["weights"]).__name__))
            registry["shared"] = registry_from_dict({"peeked": len(seen)})

    hook = Peek(every(1, "epoch"), requires=("optimiser.cost_total", "network.layers.*<dense>.weights")).in_background()
    run = iris_run(epochs=2)
    operator_for(run, hook).run()
    assert len(seen) == 2
    keys, optimiser_keys, thread, array_type = seen[0]
    assert keys == ["network", "optimiser"] and optimiser_keys == ["cost_total"]
    assert thread is not threading.main_thread() and array_type == "NDArray"


def test_background_writes_to_shared_are_merged_and_live_objects_refused():
    class Writer(Hook):
        def invoke(self, registry, resolver):
            from sigma_core.hooks.access import write
            write(resolver, "shared.answer", 42)

    run = iris_run(epochs=2)
    operator = operator_for(run, Writer(every(1, "epoch")).in_background())
    operator.run()
    assert operator.dispatcher.publication.registry["shared"]["answer"] == 42

    live = Recorder("live", every(1, "epoch"), [], requires=("trainer.self",)).in_background()
    with pytest.raises(HookError, match="trainer.self.*cannot be copied"):
        operator_for(iris_run(epochs=1), live).run()


def test_invocation_order_puts_locals_before_globals():
    log = []
    glob = Recorder("g", every(1), log, priority=-10).targeting("global")
    local = Recorder("l", every(1), log, priority=10)
    assert [h.label for h in invocation_order([glob, local])] == ["l", "g"]


# --- built-in hooks ---------------------------------------------------------------


def test_stop_at_epoch():
    run = iris_run(epochs=50)
    reports = operator_for(run, StopTraining(at_epoch=3)).run()
    assert len(reports) == 3 and run.trainer.epoch == 3


def test_stop_mid_epoch_from_an_iteration_hook():
    run = iris_run(epochs=5)
    stop = StopTraining(every=every(5, "iteration"))
    reports = operator_for(run, stop).run()
    assert reports == [] and run.trainer.total_iterations == 5


def test_early_stopping_after_patience():
    run = iris_run(epochs=50)
    # a value that never improves after its first reading: stop after 1 + patience epochs
    hook = EarlyStopping("shared.flat", patience=3, mode="max")

    class Publish(Hook):
        def invoke(self, registry, resolver):
            registry["shared"]["flat"] = 1.0

    reports = operator_for(run, Publish(every(1, "epoch")).with_priority(-1), hook).run()
    assert len(reports) == 4


def test_accuracy_reporter_writes_shared_values_and_logs(caplog):
    run = iris_run(epochs=2, hooks=[
        {"type": "accuracy_reporter", "iterator": "validation", "tops": [1, 2], "every": [1, "epoch"]},
        {"type": "early_stopping", "value": "shared.validation.accuracy_top1", "patience": 5, "mode": "max"},
    ])
    operator = operator_for(run, *run.hooks)
    with caplog.at_level(logging.INFO, logger="sigma.hooks"):
        reports = operator.run()
    shared = operator.dispatcher.publication.registry["shared"]["validation"]
    assert shared["accuracy_top1"] == pytest.approx(reports[-1].validation["validation"]["top1"])
    assert shared["accuracy_top1"] <= shared["accuracy_top2"] <= 1.0
    assert sum("validation accuracy: top1 = " in r.message for r in caplog.records) == 2


def test_nan_in_a_weight_stops_naming_the_parameter():
    class Poison(Hook):
        def invoke(self, registry, resolver):
            weights = registry["network"]["layers"]["2-dense"]["weights"]
            values = weights.to_numpy()
            values[1, 2] = np.nan
            weights.handler.fill(weights, weights.handler.asarray(values))

    run = iris_run(epochs=5)
    with pytest.raises(NonFiniteError, match=r"parameter '2-dense.weights' holds nan at index \[1, 2\]"):
        operator_for(run, Poison(after(3, "iteration")), StopOnNonFinite()).run()
    assert run.trainer.total_iterations == 3


def test_learning_rate_schedules():
    def rates(schedule, steps):
        schedule.base = 1.0
        return [schedule.rate(t) for t in range(steps)]

    assert rates(StepSchedule(2, gamma=0.5), 5) == [1, 1, 0.5, 0.5, 0.25]
    assert rates(ExponentialSchedule(0.5), 3) == [1, 0.5, 0.25]
    assert rates(CosineSchedule(4), 6) == pytest.approx([1, 0.8535534, 0.5, 0.1464466, 0, 0])
    assert rates(WarmUp(4), 6) == [0, 0.25, 0.5, 0.75, 1, 1]

    run = iris_run(epochs=2, hooks=[{"type": "exponential_schedule", "gamma": 0.5, "per": "epoch"}])
    base = run.trainer.optimiser.learning_rate
    operator_for(run, *run.hooks).run()
    assert run.trainer.optimiser.learning_rate == pytest.approx(base * 0.25)


def test_clip_modifier_applies_by_pattern():
    run = iris_run(epochs=1, hooks=[{"type": "clip", "parameters": "*.weights", "minimum": -0.01, "maximum": 0.01}])
    operator_for(run, *run.hooks).run()
    state = run.trainer.network.state_dict()
    assert all(np.abs(v).max() <= 0.01 + 1e-7 for k, v in state.items() if k.endswith(".weights"))
    assert any(np.abs(v).max() > 0.01 for k, v in state.items() if not k.endswith(".weights"))


def test_metric_processor_and_running_time_write_shared_values():
    run = iris_run(epochs=1, hooks=[{"type": "metric_processor", "parameters": "*<dense>.weights"},
                                    {"type": "running_time", "every": [2, "iteration"], "span": 4}])
    operator = operator_for(run, *run.hooks)
    operator.run()
    shared = operator.dispatcher.publication.registry["shared"]
    assert shared["metrics"]["weights_std"] > 0 and shared["metrics"]["updates_std"] > 0
    assert shared["time_iteration_span4_min"] <= shared["time_iteration_span4_average"] <= shared["time_iteration_span4_max"]


def test_running_time_hooks_with_different_spans_keep_separate_results():
    run = iris_run(epochs=1, hooks=[{"type": "running_time", "every": [1, "iteration"], "span": 1},
                                    {"type": "running_time", "every": [1, "iteration"], "span": 1000}])
    operator = operator_for(run, *run.hooks)
    assert len([h for h in operator.hooks if type(h).__name__ == "RunningTime"]) == 2
    operator.run()
    shared = operator.dispatcher.publication.registry["shared"]
    one = {part: shared[f"time_iteration_span1_{part}"] for part in ("last", "average", "min", "max")}
    all_ = {part: shared[f"time_iteration_span1000_{part}"] for part in ("last", "average", "min", "max")}
    assert one["min"] == one["max"] == one["average"] == one["last"]  # a span of one holds only the last time
    assert all_["min"] < all_["max"]  # the long span kept its own history
    assert "time_iteration_last" not in shared


# --- run files ----------------------------------------------------------------------


def test_config_errors_name_the_problem():
    with pytest.raises(UnknownComponentError, match="unknown hook 'value_reportr'.*available: .*value_reporter"):
        iris_run(hooks=[{"type": "value_reportr"}])
    with pytest.raises(ConfigError, match=r"unknown key hooks\[0\].at_epcoh for hook 'stop'; allowed: type, every"):
        iris_run(hooks=[{"type": "stop", "at_epcoh": 3}])
    with pytest.raises(ConfigError, match="unknown key 'mdoe'"):
        iris_run(hooks=[{"type": "value_reporter", "values": ["epoch"], "on": {"extrema": "epoch", "mdoe": "min"}}])


def test_config_builds_criteria_and_time_steps():
    run = iris_run(hooks=[{"type": "value_reporter", "values": ["optimiser.cost_total"], "every": [2, "iteration", 3],
                           "on": {"threshold": "optimiser.cost_total", "op": "<", "value": 9, "repeated": 2},
                           "priority": 7, "target": "global"}])
    (hook,) = run.hooks
    assert hook.time_step == every(2, "iteration", live=3) and hook.priority == 7 and hook.target == "global"
    assert hook.criteria == Threshold("optimiser.cost_total", "<", 9).repeated(2)


def write_idx(path, array):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_mnist_hooks_example_runs(tmp_path, capsys):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 300)
    images = (rng.random((300, 28, 28)) * 60).astype(np.uint8)
    images[np.arange(300), labels, :] = 255  # learnable: the label's row lights up
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    code = main(["train", str(EXAMPLES / "mnist_hooks.toml"), "--quiet",
                 "--set", f"data.directory={str(tmp_path)!r}".replace("'", '"'),
                 "--set", "split.train=[0, 200]", "--set", "split.validation=[200, 300]",
                 "--set", "training.epochs=1", "--set", "training.batch_size=10"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "validation accuracy: top1 = " in captured.err and "top3 = " in captured.err
    assert "iterations/s" in captured.err and "epochs/s" in captured.err
    assert "optimiser.cost_total = " in captured.err
    assert "sigma" not in captured.out.replace("mnist_hooks", "")  # reports stay off stdout


def test_checkpoint_hook_keeps_the_best_epochs_and_they_resume(tmp_path):
    """A saver gated on a new best validation accuracy writes loadable checkpoints, at most `keep`."""
    from sigma_core.checkpoint import checkpoints, load_checkpoint
    from sigma_core.run import build_run

    raw = tomllib.loads((Path(__file__).resolve().parents[1] / "examples" / "digits.toml").read_text())
    raw["training"]["epochs"] = 4
    raw["hooks"] = [
        {"type": "accuracy_scorer", "iterator": "validation", "tops": [1]},
        {"type": "checkpoint", "directory": str(tmp_path), "keep": 2,
         "on": {"extrema": "shared.validation.accuracy_top1", "mode": "max"}},
    ]
    run = build_run(run_config.validate(raw))
    run.train()
    saved = checkpoints(tmp_path, "digits")
    assert 1 <= len(saved) <= 2
    best = load_checkpoint(saved[-1])
    assert best.config["name"] == "digits"
    assert best.trainer["epoch"] >= 1


def test_binary_accuracy_scorer_thresholds_the_single_output():
    """XOR's sigmoid output scored at two thresholds; a multi-output network is refused."""
    from sigma_core.hooks.access import HookError
    from sigma_core.hooks.publication import Publication
    from sigma_core.hooks.scorers import BinaryAccuracyScorer
    from sigma_core.run import build_run

    examples = Path(__file__).resolve().parents[1] / "examples"
    run = build_run(run_config.validate(tomllib.loads((examples / "xor.toml").read_text())))
    run.train()
    published = Publication(run.trainer)
    BinaryAccuracyScorer(threshold=0.5).invoke(published.registry, published.resolver)
    assert published.registry["shared"]["validation"]["accuracy"] == 1.0
    BinaryAccuracyScorer(threshold=1.0).invoke(published.registry, published.resolver)  # nothing exceeds 1
    assert published.registry["shared"]["validation"]["accuracy"] == 0.5  # only the two 0-targets agree

    digits = build_run(run_config.validate(tomllib.loads((examples / "digits.toml").read_text())))
    digits.trainer.initialise(digits.handler)
    published = Publication(digits.trainer)
    with pytest.raises(HookError, match="one output per record, it has 10"):
        BinaryAccuracyScorer().invoke(published.registry, published.resolver)

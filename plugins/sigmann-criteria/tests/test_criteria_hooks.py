"""Sigma's declarative hooks on the core's protocol: cadences, criteria, requirements, background, run files."""

from __future__ import annotations

import gzip
import logging
import struct
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sigma_core import ConfigError, Hook, HookError, build_run
from sigma_core import config as run_config
from sigma_core.cli import main
from sigma_core.training.loop import Loop
from sigmann_criteria.access import write
from sigmann_criteria.criteria import Extrema, External, Threshold
from sigmann_criteria.hook import CriteriaHook, dependency_order
from sigmann_criteria.publication import Publication
from sigmann_criteria.registry import RegistryResolver, registry_from_dict
from sigmann_criteria.scorers import BinaryAccuracyScorer
from sigmann_criteria.cadence import after, every

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

# 96 synthetic records in 3 classes, 9 batches an epoch, on the numpy handler: no other plugin needed.
RUN = {"name": "blobs", "seed": 0, "handler": {"name": "numpy"},
       "data": {"extractor": "synthetic", "n": 96, "shape": 5, "classes": 3}, "split": {"validation": 0.25},
       "network": {"layers": [{"type": "input", "shape": [5]}, {"type": "dense", "size": 3}, {"type": "softmax_ce"}]},
       "optimiser": {"type": "sgd", "learning_rate": 0.1}, "training": {"batch_size": 8, "prefetch": 0}}


def blobs(epochs=2, hooks=()):
    run = build_run(run_config.validate({**RUN, "training": {**RUN["training"], "epochs": epochs}, "hooks": list(hooks)}))
    run.trainer.initialise(run.handler)
    return run


def train(run, *hooks):
    """Train ``run`` with its own hooks and ``hooks``; returns the loop (its dispatcher's failures, the reports)."""
    loop = Loop(run.trainer, epochs=run.epochs, hooks=[*run.hooks, *hooks])
    loop.run()
    return loop


class Recorder(CriteriaHook):
    """Records (label, epoch, iteration, thread) each time it fires."""

    def __init__(self, label, step, log, requires=(), priority=0, **options):
        super().__init__(step, parameters={"label": label}, requires=requires, priority=priority, **options)
        self.label, self.log = label, log

    def invoke(self, registry, resolver):
        self.log.append((self.label, registry.get("epoch"), registry.get("iteration"), threading.current_thread()))


# --- cadences -----------------------------------------------------------


def fired(step, events):
    countdown = step.countdown()
    return [i for i in range(1, events + 1) if countdown.tick()]


def test_cadences_fire_on_intervals_and_live_time():
    assert fired(every(3, "iteration"), 10) == [3, 6, 9]
    assert fired(every(2, "epoch", live=2), 10) == [2, 4]
    assert fired(after(4, "iteration"), 10) == [4]
    with pytest.raises(ConfigError, match="interval"):
        every(0)
    with pytest.raises(ConfigError, match="time scale"):
        every(1, "fortnight")


def test_hooks_fire_on_their_time_scales_and_intervals():
    run = blobs(epochs=2)
    log = []
    hooks = [Recorder(scale, every(1, scale), log) for scale in ("start", "iteration", "epoch", "stop")]
    train(run, *hooks, Recorder("third", every(3, "iteration", live=2), log))
    labels = [entry[0] for entry in log]
    assert labels[0] == "start" and labels[-1] == "stop"
    assert labels.count("iteration") == 18 and labels.count("epoch") == 2
    assert [e[1] for e in log if e[0] == "epoch"] == [1, 2]
    assert [e[1:3] for e in log if e[0] == "third"] == [(0, 3), (0, 6)]  # live time 2: twice, then never again


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
    log = []
    train(blobs(epochs=3), Recorder("gated", every(1, "epoch"), log).on(Threshold("epoch", ">=", 2)))
    assert [e[1] for e in log] == [2, 3]


# --- requirements, priority, background ---------------------------------------


def test_priority_orders_hooks_and_requirements_run_first():
    log = []
    late = Recorder("late", every(1, "epoch"), log, priority=5)
    early = Recorder("early", every(1, "epoch"), log, priority=-5)
    dependency = Recorder("dependency", every(1, "epoch"), log, priority=100)
    early.require_hook(dependency)
    train(blobs(epochs=1), late, early)
    assert [e[0] for e in log] == ["dependency", "early", "late"]  # a requirement runs with the hook needing it


def test_cycle_is_rejected_naming_the_hooks():
    log = []
    a, b = Recorder("a", every(1), log), Recorder("b", every(1), log)
    a.require_hook(b)
    b.require_hook(a)
    with pytest.raises(HookError, match=r"cycle: Recorder\(label='a'.*Recorder\(label='b'.*Recorder\(label='a'"):
        dependency_order(a)


def test_a_background_hook_reads_copies_of_its_entries_off_the_training_thread():
    seen = []

    class Peek(CriteriaHook):
        def invoke(self, registry, resolver):
            (_, weights), = resolver.resolve_get("network.layers.*<dense>.weights")
            seen.append((registry["optimiser"]["cost_total"], type(weights).__name__, threading.current_thread()))

    hook = Peek(every(1, "epoch"), requires=("optimiser.cost_total", "network.layers.*<dense>.weights"),
                background=True)
    loop = train(blobs(epochs=2), hook)
    assert [cost for cost, _, _ in seen] == [report.cost for report in loop.reports]  # at an epoch: its mean
    _, array_type, thread = seen[0]
    assert thread is not threading.main_thread() and array_type == "ndarray"  # a NumPy copy, tags kept


def test_background_writes_to_shared_reach_the_run_and_live_objects_are_refused():
    class Writer(CriteriaHook):
        def invoke(self, registry, resolver):
            write(resolver, "shared.answer", 42)

    class Reader(CriteriaHook):
        def invoke(self, registry, resolver):
            self.seen = registry["shared"]["answer"]

    class Wait(Hook):  # holds training until the writer's thread has written
        def on_iteration(self):
            if self.run.values["total_iterations"] == 12:
                deadline = time.monotonic() + 30
                while "shared.answer" not in self.run.published and time.monotonic() < deadline:
                    time.sleep(0.01)

    reader = Reader(after(15, "iteration"))
    train(blobs(epochs=2), Writer(every(1, "epoch"), background=True), Wait(), reader)
    assert reader.seen == 42  # written on the writer's thread after epoch 1, merged at a later event

    live = Recorder("live", every(1, "epoch"), [], requires=("trainer.self",), background=True)
    with pytest.raises(HookError, match="declares 'trainer.self', which is live and cannot be copied"):
        train(blobs(epochs=1), live)


# --- the hooks ---------------------------------------------------------------------------------


def test_accuracy_reporter_writes_shared_values_and_logs_and_core_hooks_read_them(caplog):
    run = blobs(epochs=2, hooks=[
        {"type": "accuracy_reporter", "iterator": "validation", "tops": [1, 2], "every": [1, "epoch"]},
        {"type": "early_stopping", "value": "shared.validation.accuracy_top1", "patience": 5, "mode": "max"},
    ])

    class Shared(CriteriaHook):
        def invoke(self, registry, resolver):
            self.shared = dict(registry["shared"]["validation"])

    shared = Shared(every(1, "stop"))
    with caplog.at_level(logging.INFO, logger="sigma.hooks"):
        loop = train(run, shared)
    assert loop.dispatcher.failures == []
    assert shared.shared["accuracy_top1"] == pytest.approx(loop.reports[-1].validation["validation"]["top1"])
    assert shared.shared["accuracy_top1"] <= shared.shared["accuracy_top2"] <= 1.0
    assert sum("validation accuracy: top1 = " in r.message for r in caplog.records) == 2


def test_the_core_checkpoint_hook_keeps_the_best_epochs_by_a_scorer_result(tmp_path):
    from sigma_core.training.checkpoint import checkpoints, load_checkpoint

    run = blobs(epochs=4, hooks=[
        {"type": "accuracy_scorer", "iterator": "validation", "tops": [1]},
        {"type": "checkpoint", "directory": str(tmp_path), "keep": 2, "best": "shared.validation.accuracy_top1"},
    ])
    run.train()
    saved = checkpoints(tmp_path, "blobs")
    assert 1 <= len(saved) <= 2 and load_checkpoint(saved[-1]).trainer["epoch"] >= 1


def test_clip_modifier_applies_by_pattern():
    run = blobs(epochs=1, hooks=[{"type": "clip", "parameters": "*.weights", "minimum": -0.01, "maximum": 0.01}])
    train(run)
    state = run.trainer.network.state_dict()
    assert all(np.abs(v).max() <= 0.01 + 1e-7 for k, v in state.items() if k.endswith(".weights"))
    assert any(np.abs(v).max() > 0.01 for k, v in state.items() if not k.endswith(".weights"))


class SharedAtStop(CriteriaHook):
    def __init__(self):
        super().__init__(every(1, "stop"))

    def invoke(self, registry, resolver):
        self.shared = registry["shared"]


def test_metric_processor_and_running_time_write_shared_values():
    run = blobs(epochs=1, hooks=[{"type": "metric_processor", "parameters": "*<dense>.weights"},
                                 {"type": "running_time", "every": [2, "iteration"], "span": 4}])
    probe = SharedAtStop()
    train(run, probe)
    shared = probe.shared
    assert shared["metrics"]["weights_std"] > 0 and shared["metrics"]["updates_std"] > 0
    assert shared["time_iteration_span4_min"] <= shared["time_iteration_span4_average"] <= shared["time_iteration_span4_max"]


def test_running_time_hooks_with_different_spans_keep_separate_results():
    run = blobs(epochs=1, hooks=[{"type": "running_time", "every": [1, "iteration"], "span": 1},
                                 {"type": "running_time", "every": [1, "iteration"], "span": 1000}])
    probe = SharedAtStop()
    train(run, probe)
    shared = probe.shared
    one = {part: shared[f"time_iteration_span1_{part}"] for part in ("last", "average", "min", "max")}
    all_ = {part: shared[f"time_iteration_span1000_{part}"] for part in ("last", "average", "min", "max")}
    assert one["min"] == one["max"] == one["average"] == one["last"]  # a span of one holds only the last time
    assert all_["min"] < all_["max"]  # the long span kept its own history


def test_stop_when_its_criteria_pass():
    run = blobs(epochs=50, hooks=[{"type": "stop_when", "on": {"threshold": "epoch", "op": ">=", "value": 3}}])
    assert len(train(run).reports) == 3
    with pytest.raises(HookError, match="stop_when: it needs criteria"):
        blobs(hooks=[{"type": "stop_when"}])


def test_binary_accuracy_scorer_thresholds_the_single_output():
    """XOR's sigmoid output scored at two thresholds; a multi-output network is refused."""
    run = build_run(run_config.validate(tomllib.loads((EXAMPLES / "xor.toml").read_text())))

    class Scores(CriteriaHook):
        def __init__(self, threshold):
            super().__init__(every(1, "stop"))
            self.threshold = threshold

        def invoke(self, registry, resolver):
            BinaryAccuracyScorer(threshold=self.threshold).invoke(registry, resolver)
            self.accuracy = registry["shared"]["validation"]["accuracy"]

    at_half, at_one = Scores(0.5), Scores(1.0)
    run.train([at_half, at_one])
    assert at_half.accuracy == 1.0
    assert at_one.accuracy == 0.5  # nothing exceeds 1: only the two 0-targets agree

    refused = blobs(epochs=1)

    class Refused(CriteriaHook):
        def invoke(self, registry, resolver):
            BinaryAccuracyScorer().invoke(registry, resolver)

    with pytest.raises(HookError, match="one output per record, it has 3"):
        train(refused, Refused(every(1, "start")))


# --- run files ----------------------------------------------------------------------


def test_config_errors_name_the_problem():
    with pytest.raises(ConfigError, match="unknown key 'mdoe'"):
        blobs(hooks=[{"type": "value_reporter", "values": ["epoch"], "on": {"extrema": "epoch", "mdoe": "min"}}])
    with pytest.raises(ConfigError, match=r"every must be \[interval, \"scale\"\]"):
        blobs(hooks=[{"type": "value_reporter", "values": ["epoch"], "every": 3}])
    with pytest.raises(HookError, match=r"ValueReporter: target is gone: every hook runs once per event"):
        blobs(hooks=[{"type": "value_reporter", "values": ["epoch"], "target": "global"}])


def test_config_builds_criteria_cadences_and_order():
    run = blobs(hooks=[{"type": "value_reporter", "values": ["optimiser.cost_total"], "every": [2, "iteration", 3],
                        "on": {"threshold": "optimiser.cost_total", "op": "<", "value": 9, "repeated": 2},
                        "priority": 7, "background": True}])
    (hook,) = run.hooks
    assert hook.cadence == every(2, "iteration", live=3) and hook.order == 7 and hook.threaded
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


def test_the_live_registry_is_one_per_run_and_shared_by_its_hooks():
    seen = []

    class Same(CriteriaHook):
        def invoke(self, registry, resolver):
            seen.append(Publication.of(self.run).registry)

    train(blobs(epochs=1), Same(every(1, "start")), Same(every(1, "stop")))
    assert len(seen) == 2 and seen[0] is seen[1]

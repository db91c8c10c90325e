"""The tensorboard hook's event files, read back with TensorBoard's own reader."""

from __future__ import annotations

import collections
import errno
import json
import logging
import re
import shlex
import time

import numpy
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
from tensorboard.plugins.hparams import plugin_data_pb2

from sigma_core import Hook, build_run, plugins
from sigma_core import config as run_config
from sigma_core.cli import main
from sigmann_tensorboard.hook import EventFile, TensorBoardHook

@pytest.fixture
def run_file(sigma_run_file):
    return sigma_run_file("optimiser.type=momentum")


def events(directory) -> EventAccumulator:
    accumulator = EventAccumulator(str(directory), size_guidance={"histograms": 0, "scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def scalars(accumulator, tag) -> dict:
    return {event.step: event.value for event in accumulator.Scalars(tag)}


def test_scalars_equal_the_printed_epoch_lines_and_the_metrics_files(run_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(run_file), "--monitor", f"metrics:directory='{out}',every=3", "--monitor",
                 f"tensorboard:directory='{out}',every=3", "--monitor", "progress"]) == 0
    printed = re.findall(r"epoch (\d)/2  train cost (\S+)  validation accuracy (\S+)% cost (\S+)",
                         capsys.readouterr().err)
    board = events(out)
    assert len(printed) == 2
    for epoch, cost, accuracy, validation_cost in printed:
        epoch = int(epoch)
        assert f"{scalars(board, 'epoch/cost')[epoch]:.4f}" == cost
        assert f"{scalars(board, 'epoch/validation.accuracy')[epoch]:.2%}" == accuracy + "%"
        assert f"{scalars(board, 'epoch/validation.cost')[epoch]:.4f}" == validation_cost

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for record in records[:-1]:  # the last says how the run ended: not a scalar  # every value the metrics hook logged, at the same step (float32 in the events)
        step = record["step"] if record["event"] == "iteration" else record["epoch"]
        for name, value in record.items():
            if name not in ("time", "event", "epoch", "iteration", "step"):
                assert scalars(board, f"{record['event']}/{name}")[step] == pytest.approx(value, rel=1e-6)
    assert sorted(scalars(board, "iteration/cost")) == [3, 6, 9, 12, 15, 18]
    assert scalars(board, "epoch/learning_rate") == {1: pytest.approx(0.1), 2: pytest.approx(0.1)}

    config = board.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    monitors = [{"type": "metrics", "directory": str(out), "every": 3}, {"type": "tensorboard", "directory": str(out),
                                                                        "every": 3}, {"type": "progress"}]
    # The run file as validated, with the --monitor hooks it was given (a resumed run gets them back), as code.
    assert json.loads(config) == {**run_config.load(run_file, []), "hooks": monitors}


def assert_histogram(histogram, array):
    value = histogram.histogram_value
    assert (value.num, value.min, value.max) == (array.size, pytest.approx(array.min()), pytest.approx(array.max()))
    assert value.sum == pytest.approx(array.sum(), abs=1e-6)


class Live(Hook):
    """Inline: the parameters (and published updates) as the training thread had them at start and each epoch."""

    def __init__(self):
        self.seen = []

    def on_start(self):
        self.on_epoch(None)

    def on_epoch(self, report):
        values = self.run.values
        self.seen.append({"weights": values["network.layers.2-dense.weights"],
                          "biases": values["network.layers.2-dense.biases"],
                          "step": values.get("optimiser.updates.2-dense.weights")})


def test_histograms_are_the_weights_and_their_change_over_each_epoch(run_file, tmp_path):
    run = build_run(run_config.load(run_file, []))
    live = Live()
    run.train([TensorBoardHook(directory=str(tmp_path)), live])
    start, first, second = live.seen
    board = events(tmp_path)
    for histogram, arrays in zip(board.Histograms("weights/2-dense.weights"), (first, second)):
        assert_histogram(histogram, arrays["weights"])
    for histogram, arrays in zip(board.Histograms("weights/2-dense.biases"), (first, second)):
        assert_histogram(histogram, arrays["biases"])
    updates = board.Histograms("updates/2-dense.weights")
    assert [h.step for h in updates] == [1, 2]
    assert_histogram(updates[0], first["weights"] - start["weights"])
    assert_histogram(updates[1], second["weights"] - first["weights"])
    assert run.trainer.optimiser.publish_updates is False and first["step"] is None  # costs training nothing


def test_step_updates_are_the_optimisers_published_update_of_each_epochs_last_step(run_file, tmp_path):
    run = build_run(run_config.load(run_file, []))
    live = Live()
    run.train([TensorBoardHook(directory=str(tmp_path), updates="step"), live])
    updates = events(tmp_path).Histograms("updates/2-dense.weights")
    assert [h.step for h in updates] == [1, 2]
    for histogram, arrays in zip(updates, live.seen[1:]):
        assert_histogram(histogram, arrays["step"])
        assert numpy.abs(arrays["step"]).max() > 0
    assert run.trainer.optimiser.publish_updates is True


def test_hparams_hold_the_run_settings_and_the_final_metrics_in_the_run_of_its_scalars(run_file, tmp_path):
    run = build_run(run_config.load(run_file, []))
    summary = run.train([TensorBoardHook(directory=str(tmp_path), histograms="")])
    assert [path.name for path in tmp_path.iterdir() if path.is_dir()] == []  # no run of their own beside it
    board = events(tmp_path)
    assert sorted(scalars(board, "epoch/cost")) == [1, 2]  # the same run as the scalars: one row in TensorBoard
    content = board.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    hparams = {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
               for name, value in start.hparams.items()}
    assert hparams["optimiser.type"] == "momentum" and hparams["optimiser.learning_rate"] == pytest.approx(0.1)
    assert hparams["training.batch_size"] == 8 and hparams["handler.name"] == "numpy"
    assert "network.layers" not in hparams  # a list of tables is not a setting
    assert scalars(board, "final/validation.accuracy") == {2: pytest.approx(summary["accuracy"])}
    assert scalars(board, "final/cost") == {2: pytest.approx(summary["cost"])}
    assert events(tmp_path).Tags()["histograms"] == []  # histograms = "" turns them off


@pytest.mark.parametrize("failing, event", [("write", "on_start"), ("flush", "on_epoch")])
def test_a_full_disk_is_one_line_and_the_hook_is_detached_while_training_goes_on(run_file, tmp_path, monkeypatch,
                                                                                   caplog, capfd, failing, event):
    """No traceback from a writer thread and no hang at the end: the hook writes on its own thread, where the error
    reaches the dispatcher. (By hand: ``mount -t tmpfs -o size=64k tmpfs /tmp/full``, fill it, and train with
    ``--monitor tensorboard:directory='/tmp/full/tb'``.)"""
    from tensorboardX.record_writer import RecordWriter

    def full(self, *arguments):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RecordWriter, failing, full)
    run = build_run(run_config.load(run_file, []))
    with caplog.at_level(logging.WARNING, logger="sigma"):
        summary = run.train([TensorBoardHook(directory=str(tmp_path))])
    assert summary["epochs"] == 2  # trained to the end
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == [
        f"hook 'tensorboard' failed in {event}: OSError: [Errno 28] No space left on device; "
        "detached, training goes on"]
    assert "Traceback" not in capfd.readouterr().err


def test_a_file_where_its_directory_belongs_is_one_line_naming_it(run_file, tmp_path, caplog):
    """A file (or /dev/null) given as the directory: WriteError's one line, not a FileExistsError from mkdir."""
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    run = build_run(run_config.load(run_file, []))
    with caplog.at_level(logging.WARNING, logger="sigma"):
        summary = run.train([TensorBoardHook(directory=str(blocker))])
    assert summary["epochs"] == 2
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == [
        f"hook 'tensorboard' failed in on_start: WriteError: tensorboard directory {blocker}: cannot write there "
        "(it is a file, not a folder); detached, training goes on"]


def test_sigma_plugins_lists_the_hook_with_its_distribution():
    component = plugins.get("hook", "tensorboard")
    assert component.distribution == "sigmann-tensorboard"


def test_bad_arguments_are_one_line_errors(run_file, capsys):
    for option, message in (("every=-2", "--monitor[0].every: expected an integer >= 0, got -2"),
                            ("histograms=1", "--monitor[0].histograms: expected a string, got 1"),
                            ("updates=all", "tensorboard: updates must be \"epoch\", \"step\" or \"\", got 'all'")):
        assert main(["train", str(run_file), "--quiet", "--monitor", f"tensorboard:{option}"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {message}"


def test_a_throttled_writer_still_writes_every_iteration_scalar_the_metrics_file_holds(run_file, tmp_path,
                                                                                       monkeypatch):
    """The disk made slow on purpose (20 ms per event) and a queue of 2: the hook falls far behind, its events wait
    in the run directory's spool instead of being dropped, and its file holds each iteration the metrics file does."""
    write = EventFile._write

    def slow(self, event):
        time.sleep(0.02)
        write(self, event)

    monkeypatch.setattr(EventFile, "_write", slow)
    monkeypatch.setattr(TensorBoardHook, "queue_size", 2)
    out = tmp_path / "run"
    assert main(["train", str(run_file), "--quiet", "--monitor", f"metrics:directory='{out}',every=1",
                 "--monitor", f"tensorboard:directory='{out}',every=1"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    costs = {record["step"]: record["cost"] for record in records if record["event"] == "iteration"}
    assert sorted(costs) == list(range(1, 19))
    assert scalars(events(out), "iteration/cost") == pytest.approx(costs, rel=1e-6)


def logged_steps(directory) -> collections.Counter:
    """How often each (tag, step) of a scalar is in the event files of ``directory``, as they are on disk."""
    counted = collections.Counter()
    for path in directory.glob("events.out.tfevents.*"):
        for event in LegacyEventFileLoader(str(path)).Load():
            counted.update((value.tag, event.step) for value in event.summary.value if value.HasField("simple_value"))
    return counted


def test_a_resumed_run_keeps_its_monitors_and_its_files_hold_every_step_once(run_file, tmp_path, monkeypatch, capsys):
    """Trained 2 epochs with --monitor metrics and tensorboard, then resumed from the checkpoint of epoch 1 with the
    command the run printed (no --monitor in it): the monitors come back from the checkpoint, and what the resumed
    run trains again replaces what the first run logged past that checkpoint, on both scales."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(run_file), "--quiet", "--set", "checkpoint.every_epochs=1", "--monitor",
                 "metrics:every=1", "--monitor", "tensorboard:every=1"]) == 0
    command = shlex.split(capsys.readouterr().err.partition("train on with: ")[2].splitlines()[0])
    assert command[-2] == "--resume" and not any("monitor" in part for part in command)  # short, and true:
    assert main([*command[1:-1], "checkpoints/blobs-e1-i0.ckpt", "--quiet"]) == 0  # from epoch 1 of 2, to 4
    directory = tmp_path / "runs" / "blobs" / "version_0"
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["event"] == "iteration"] == list(range(1, 37))
    assert [r["epoch"] for r in records if r["event"] == "epoch"] == [1, 2, 3, 4]
    counted = logged_steps(directory)
    assert set(counted.values()) == {1}  # no step twice
    assert sorted(step for tag, step in counted if tag == "iteration/cost") == list(range(1, 37))
    assert sorted(step for tag, step in counted if tag == "epoch/cost") == [1, 2, 3, 4]
    assert scalars(events(directory), "iteration/cost") == pytest.approx(
        {r["step"]: r["cost"] for r in records if r["event"] == "iteration"}, rel=1e-6)

"""Checkpoints: format, integrity, cross-handler loading, exact resume (in-process), ``sigma eval``."""

from __future__ import annotations

import io
import json
import tomllib
import zipfile
from pathlib import Path

import numpy
import pytest

from sigma_core import CheckpointHook, Hook, NumpyHandler, build
from sigma_core import config as run_config
from sigma_core.training.checkpoint import (
    CheckpointError,
    checkpoints,
    latest_checkpoint,
    load_checkpoint,
    restore,
    save_checkpoint,
)
from sigma_core.cli import main
from sigma_core.model.constructs import Dense, Input, SquaredDifference
from sigma_core.data import MinibatchIterator, from_arrays
from sigma_core.errors import ConfigError, SigmaError
from sigma_core.model.network import Network
from sigma_core.run import build_run
from sigma_core.training.trainer import Trainer

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits.toml"
BATCHES = 45  # digits: 1437 training records in batches of 32, the last one kept


def digits_config(directory=None, **changes) -> dict:
    """The digits example (dropout, Adam) on NumPy, checkpointing into ``directory`` if given."""
    raw = tomllib.loads(DIGITS.read_text())
    raw["handler"]["name"] = "numpy"
    raw["training"]["epochs"] = 2
    if directory is not None:
        raw["checkpoint"] = {"directory": str(directory), "every_iterations": 15, "every_epochs": 1, "keep": 100}
    for dotted, value in changes.items():
        run_config.apply_override(raw, f"{dotted.replace('__', '.')}={json.dumps(value)}")
    return run_config.validate(raw)


class IterationLog(Hook):
    """A hook that records every iteration's cost."""

    def __init__(self):
        super().__init__()
        self.costs: list[float] = []

    def on_iteration(self):
        self.costs.append(self.run.values["cost"])


def train(run) -> tuple[list[float], dict]:
    log = IterationLog()
    summary = run.train([log])
    return log.costs, summary


def assert_same_arrays(first: dict, second: dict):
    assert first.keys() == second.keys()
    for key in first:
        assert first[key].dtype == second[key].dtype, key
        assert numpy.array_equal(first[key], second[key]), key


def tiny_trainer(seed=0, dtype="float32") -> Trainer:
    """A small regression trainer, for tests that need a small checkpoint file."""
    rng = numpy.random.default_rng(0)
    data = from_arrays(rng.normal(size=(20, 4)).astype("float32"), rng.normal(size=(20, 3)).astype("float32"))
    trainer = Trainer(Network(Input(4) + Dense(3) + SquaredDifference()),
                      build("optimiser", {"type": "adam", "learning_rate": 0.01}),
                      MinibatchIterator(data, 8, seed=seed), name="tiny")
    trainer.initialise(NumpyHandler(dtype, seed=seed))
    return trainer


# -- format ------------------------------------------------------------------------------------------------


def test_round_trip_of_parameters_optimiser_counters_and_rng(tmp_path):
    run = build_run(digits_config(training__epochs=1))
    train(run)
    trainer = run.trainer
    path = save_checkpoint(trainer, run.config, tmp_path / "a.ckpt")
    checkpoint = load_checkpoint(path)

    assert_same_arrays(checkpoint.parameters, trainer.network.state_dict())
    optimiser = trainer.optimiser.state_dict()
    assert checkpoint.optimiser["steps"] == optimiser["steps"] == BATCHES
    assert checkpoint.optimiser["hyperparameters"] == optimiser["hyperparameters"]
    for pid, buffers in optimiser["memory"].items():
        assert_same_arrays(checkpoint.optimiser["memory"][pid], buffers)
    assert checkpoint.trainer == json.loads(json.dumps(trainer.state_dict()))
    assert checkpoint.trainer["rng"]["state"] == run.handler.rng_state()
    assert checkpoint.trainer["training_iterator"] == {"epoch": 1, "position": 0}
    assert checkpoint.config == run.config
    assert checkpoint.metadata["handler"] == {"name": "numpy", "dtype": "float32"}

    # Restoring into a fresh run reproduces everything, the RNG stream included.
    other = build_run(digits_config(training__epochs=1))
    other.trainer.initialise(other.handler)
    restore(other.trainer, checkpoint)
    assert_same_arrays(other.trainer.network.state_dict(), trainer.network.state_dict())
    assert other.trainer.optimiser.steps == BATCHES
    assert other.trainer.state_dict() == trainer.state_dict()
    assert numpy.array_equal(other.handler.uniform((5,)).to_numpy(), run.handler.uniform((5,)).to_numpy())


def test_file_is_npy_arrays_and_json_only_no_pickle(tmp_path):
    trainer = tiny_trainer()
    trainer.run_epoch()
    path = save_checkpoint(trainer, None, tmp_path / "tiny.ckpt")
    with numpy.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files if not name.endswith(".json")}
        metadata = json.loads(archive["metadata.json"])
    assert set(arrays) == {
        "parameters/2-dense.weights", "parameters/2-dense.biases",
        *(f"optimiser/2-dense.{p}/{m}" for p in ("weights", "biases") for m in ("first_moment", "second_moment")),
    }
    assert all(a.dtype == numpy.float32 for a in arrays.values())
    assert metadata["format"] == "sigma-checkpoint" and metadata["version"] == 1
    assert metadata["config"] is None
    with zipfile.ZipFile(path) as archive:
        assert sorted(n.rsplit(".", 1)[1] for n in archive.namelist()) == ["json"] * 2 + ["npy"] * 6


def test_float32_checkpoint_loads_into_a_float64_run(tmp_path, caplog):
    run = build_run(digits_config(training__epochs=1))
    train(run)
    checkpoint = load_checkpoint(save_checkpoint(run.trainer, run.config, tmp_path / "a.ckpt"))

    wide = build_run(digits_config(handler__dtype="float64", training__epochs=2))
    checkpoint = wide.resume(checkpoint)
    assert "not bit-identically" in caplog.text
    for pid, value in wide.trainer.network.state_dict().items():
        assert value.dtype == numpy.float64
        assert numpy.array_equal(value, checkpoint.parameters[pid].astype(numpy.float64))
    costs, summary = train(wide)  # and it trains on: one more epoch from the float32 state
    assert len(costs) == BATCHES and all(numpy.isfinite(costs))
    assert summary["accuracy"] > 0.9


# -- integrity ---------------------------------------------------------------------------------------------


def test_truncated_checkpoint_is_detected(tmp_path):
    trainer = tiny_trainer()
    path = save_checkpoint(trainer, None, tmp_path / "tiny.ckpt")
    data = path.read_bytes()
    for size in (0, 10, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:size])
        with pytest.raises(CheckpointError, match=r"tiny\.ckpt: truncated or corrupted"):
            load_checkpoint(path)


def test_any_flipped_byte_is_detected_or_harmless(tmp_path):
    """A flip anywhere either raises CheckpointError or lands outside the payload (zip timestamps, ...)."""
    trainer = tiny_trainer()
    trainer.run_epoch()
    path = save_checkpoint(trainer, None, tmp_path / "tiny.ckpt")
    original = load_checkpoint(path)
    data = path.read_bytes()
    damaged = tmp_path / "damaged.ckpt"
    detected = 0
    for offset in range(len(data)):
        flipped = bytearray(data)
        flipped[offset] ^= 0x10
        damaged.write_bytes(flipped)
        try:
            loaded = load_checkpoint(damaged)
        except CheckpointError as error:
            assert str(error).startswith(f"checkpoint {damaged}: "), error
            detected += 1
            continue
        assert loaded.metadata == original.metadata
        assert_same_arrays(loaded.parameters, original.parameters)
    assert detected > 0.8 * len(data)  # the rest: zip timestamps, version and attribute fields


def test_checksum_catches_a_consistent_zip_with_changed_contents(tmp_path):
    """The zip's own CRCs are rewritten by whoever edits the archive; the SHA-256 is not."""
    trainer = tiny_trainer()
    path = save_checkpoint(trainer, None, tmp_path / "tiny.ckpt")
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    stream = io.BytesIO()
    numpy.lib.format.write_array(stream, numpy.zeros((4, 3), numpy.float32))
    members["parameters/2-dense.weights.npy"] = stream.getvalue()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(path)


def test_missing_file_and_foreign_zip(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "nope.ckpt")
    numpy.savez(tmp_path / "plain.npz", a=numpy.zeros(3))
    with pytest.raises(CheckpointError, match="not a Sigma checkpoint"):
        load_checkpoint(tmp_path / "plain.npz")


# -- saving during training ------------------------------------------------------------------------------------


def test_checkpoint_hooks_name_and_keep_the_newest(tmp_path):
    from sigma_core.training.loop import Loop

    trainer = tiny_trainer()  # 3 batches an epoch
    hooks = [CheckpointHook(tmp_path, keep=3, every=2), CheckpointHook(tmp_path, keep=3)]  # 2 iterations, 1 epoch
    Loop(trainer, epochs=3, hooks=hooks).run()
    names = [p.name for p in checkpoints(tmp_path, "tiny")]
    # Saved: e0-i2, e1-i0, e1-i1, e1-i3 (an epoch's last batch), e2-i0, e2-i2, e3-i0; the newest 3 stay.
    assert names == ["tiny-e2-i0.ckpt", "tiny-e2-i2.ckpt", "tiny-e3-i0.ckpt"]
    assert latest_checkpoint(tmp_path, "tiny").name == "tiny-e3-i0.ckpt"
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind
    with pytest.raises(SigmaError, match="checkpoint: keep: expected an integer >= 1, got 0"):
        CheckpointHook(tmp_path, keep=0)


def test_checkpoint_section_builds_one_hook_per_time_scale(tmp_path):
    from sigma_core.hooks.checkpoints import checkpoint_hooks_from_config

    assert checkpoint_hooks_from_config(digits_config()) == []
    hooks = checkpoint_hooks_from_config(digits_config(tmp_path))  # every 15 iterations and every epoch
    assert [(h.directory, h.keep, h.every) for h in hooks] == [(tmp_path, 100, 15), (tmp_path, 100, [1, "epoch"])]
    with pytest.raises(ConfigError, match="checkpoint.every_epochs: expected an integer >= 0, got -1"):
        digits_config(checkpoint__every_epochs=-1)  # checked with the run file, before any data is read


def test_checkpoint_section_is_validated():
    with pytest.raises(ConfigError, match="unknown key checkpoint.evry"):
        digits_config(checkpoint__evry=3)
    assert digits_config()["checkpoint"] == {"directory": "checkpoints", "every_iterations": 0,
                                             "every_epochs": 0, "keep": 3}


# -- exact resume, in-process ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, epochs_done, done", [
    ("digits-e0-i30.ckpt", 0, 30),            # mid-epoch
    ("digits-e0-i45.ckpt", 0, BATCHES),       # on an epoch's last batch, before the epoch ended
    ("digits-e1-i0.ckpt", 1, BATCHES),        # at an epoch boundary
    ("digits-e1-i15.ckpt", 1, BATCHES + 15),  # mid-epoch, second epoch
])
def test_resume_gives_bit_identical_losses_and_parameters(tmp_path, name, epochs_done, done):
    reference = build_run(digits_config(tmp_path / "reference"))
    costs, summary = train(reference)
    assert len(costs) == 2 * BATCHES

    resumed = build_run(digits_config(tmp_path / "resumed"))
    resumed.resume(tmp_path / "reference" / name)
    rest, resumed_summary = train(resumed)
    assert rest == costs[done:]  # bit for bit: dropout masks, batch order, Adam's memory all continue
    assert_same_arrays(resumed.trainer.network.state_dict(), reference.trainer.network.state_dict())
    epochs = [(h["epoch"], h["cost"], h["accuracy"]) for h in summary["history"]]
    assert [(h["epoch"], h["cost"], h["accuracy"]) for h in resumed_summary["history"]] == epochs[epochs_done:]
    final = load_checkpoint(tmp_path / "resumed" / "digits-e2-i0.ckpt")
    expected = load_checkpoint(tmp_path / "reference" / "digits-e2-i0.ckpt")
    assert final.trainer == expected.trainer
    assert_same_arrays(final.parameters, expected.parameters)


# -- the command line ---------------------------------------------------------------------------------------


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def train_digits_cli(capsys, directory) -> None:
    code, _, err = cli(capsys, "train", str(DIGITS), "--quiet", "--handler", "numpy", "--set", "training.epochs=1",
                       "--set", f"checkpoint.directory={json.dumps(str(directory))}", "--set", "checkpoint.every_iterations=20",
                       "--set", "checkpoint.every_epochs=1")
    assert code == 0, err


def assert_one_error_line(code, out, err, *fragments):
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: checkpoint ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_truncated_checkpoint_fails_eval_and_resume_with_one_line_and_the_previous_loads(tmp_path, capsys):
    train_digits_cli(capsys, tmp_path)
    previous, latest = checkpoints(tmp_path, "digits")[-2:]
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])

    assert_one_error_line(*cli(capsys, "eval", str(latest)), latest.name, "truncated or corrupted")
    assert_one_error_line(*cli(capsys, "train", str(DIGITS), "--handler", "numpy", "--resume", str(latest)),
                          latest.name, "truncated or corrupted")

    load_checkpoint(previous)
    code, out, err = cli(capsys, "eval", str(previous), "--handler", "numpy")
    assert code == 0, err
    assert out.startswith(f"{previous}: validation (360 records): accuracy ")


def test_eval_reports_accuracy_and_cost_as_json(tmp_path, capsys):
    train_digits_cli(capsys, tmp_path)
    final = latest_checkpoint(tmp_path, "digits")
    code, out, err = cli(capsys, "eval", str(final), "--json", "--dataset", "training", "--dtype", "float64")
    assert code == 0, err
    report = json.loads(out)
    assert report["dataset"] == "training" and report["records"] == 1437 and report["dtype"] == "float64"
    assert 0.8 < report["accuracy"] <= 1.0 and report["cost"] > 0

    code, out, err = cli(capsys, "eval", str(final), "--data-config", str(DIGITS), "--json")
    assert code == 0, err
    assert json.loads(out)["records"] == 360

    code, _, err = cli(capsys, "eval", str(final), "--dataset", "test")
    assert code == 2 and "no dataset 'test' (choose one of validation, training)" in err


def test_resume_with_nothing_left_to_train_says_so(tmp_path, capsys):
    train_digits_cli(capsys, tmp_path)
    code, out, err = cli(capsys, "train", str(DIGITS), "--set", "training.epochs=1",
                         "--resume", str(latest_checkpoint(tmp_path, "digits")))
    assert code == 2 and "nothing left to train" in err


def test_rotation_keeps_the_checkpoint_written_last_even_after_a_reset(tmp_path):
    """After a reset epochs count from 1 again; the new e1 file is the newest, not the oldest."""
    from sigma_core.compute.backend import create_handler
    from sigma_core.model.constructs import SoftmaxCE
    from sigma_core.data import synthetic_classification
    from sigma_core.training.optimisers import GradientDescent

    trainer = Trainer(Network(Input(64) + Dense(10) + SoftmaxCE()), GradientDescent(0.01),
                      MinibatchIterator(synthetic_classification(1800, 64, 10), 600, seed=0))
    trainer.initialise(create_handler("numpy", seed=0))
    saver = CheckpointHook(tmp_path, keep=2)
    for _ in range(3):
        trainer.run_epoch()
        saver.save(trainer)
    trainer.reset()
    trainer.run_epoch()
    newest = saver.save(trainer)
    assert newest.exists()
    assert latest_checkpoint(tmp_path, trainer.name) == newest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trainer-e1-i0.ckpt", "trainer-e3-i0.ckpt"]

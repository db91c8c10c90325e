"""Issue 26: fitted preprocessing is written out (``Preprocessing.fitted``), kept in checkpoints, read back and
applied to raw inputs; ``sigma summary`` reads a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import sigma_core
from sigma_core import NumpyHandler, build
from sigma_core import config as run_config
from sigma_core.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from sigma_core.cli import main
from sigma_core.model.constructs import Dense, Input, SquaredDifference
from sigma_core.data import DataError, Dataset, MinibatchIterator, Preprocessing, from_arrays
from sigma_core.errors import ConfigError, SigmaError
from sigma_core.model.network import Network
from sigma_core.training.trainer import Trainer

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits.toml"

RNG = np.random.default_rng(0)
#: Records with a large offset, unequal scales and one constant feature (its range and deviation are 0).
RAW = np.column_stack([RNG.normal(1000, 3, 40), RNG.uniform(-2, 9, 40), np.full(40, 7.0), RNG.integers(0, 256, 40)])


@pytest.mark.parametrize("tables", [
    [{"standardise": True}],
    [{"normalise": [0, 1]}],
    [{"normalise": {"range": [-1, 1], "per_feature": True}}, {"shuffle": 3}, {"standardise": True}],
    [{"normalise": {"input_range": [0, 255]}}, {"permute": [0]}],
], ids=["standardise", "normalise", "per-feature-then-standardise", "given-range"])
def test_fitted_transforms_apply_to_raw_inputs_as_in_training(tables):
    preprocessing = Preprocessing(tables)
    trained = preprocessing(Dataset({"inputs": RAW, "targets": np.arange(40)}), fit=True)
    fitted = Preprocessing(json.loads(json.dumps(preprocessing.fitted())))  # what a checkpoint keeps
    assert fitted.adaptive == () and fitted.names == preprocessing.names
    order = trained.section("targets")  # shuffle reorders the records in training, never at prediction
    np.testing.assert_array_equal(fitted.inputs(RAW)[order], trained.section("inputs"))  # bit for bit
    assert preprocessing.raw_range == (RAW.min(), RAW.max()) and fitted.raw_range is None


def test_standardise_spells_out_its_statistics_and_takes_them_from_a_run_file():
    preprocessing = Preprocessing([{"standardise": True}])
    preprocessing(Dataset({"inputs": RAW}), fit=True)
    (table,) = preprocessing.fitted()
    np.testing.assert_array_equal(table["standardise"]["mean"], RAW.mean(axis=0))
    np.testing.assert_array_equal(table["standardise"]["std"], RAW.std(axis=0))
    given = Preprocessing([{"standardise": {"mean": [1, 2], "std": [2, 0]}}])  # a zero deviation: only centred
    np.testing.assert_array_equal(given.inputs(np.array([[3.0, 5.0]])), [[1.0, 3.0]])


@pytest.mark.parametrize("table, message", [
    ({"standardise": {"mean": [1, 2]}}, "data.preprocess.standardise: give both mean and std"),
    ({"standardise": {"mean": [1, 2], "std": [1]}}, "data.preprocess.standardise: mean and std must have one shape"),
    ({"standardise": {"mean": 0, "std": -1}}, "std >= 0"),
    ({"standardise": {"mean": ["a"], "std": [1]}}, "data.preprocess.standardise.mean: expected a finite number or an "
                                                  "array of them"),
    ({"standardise": {"mean": [[1, 2], [3]], "std": 1}}, "data.preprocess.standardise.mean: expected a finite number"),
    ({"normalise": {"input_range": [[0, 0], [1]]}}, "data.preprocess.normalise.input_range: min and max must have "
                                                     "one shape"),
    ({"normalise": {"input_range": [1, 0]}}, "min <= max"),
    ({"normalise": {"input_range": [0, True]}}, "data.preprocess.normalise.input_range: expected a finite number"),
])
def test_given_statistics_are_checked_in_one_line(table, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        Preprocessing([table])


def test_statistics_for_other_records_are_one_line_naming_the_key():
    with pytest.raises(DataError, match=r"data.preprocess.standardise.mean: values of shape \(2,\), one per feature, "
                                        r"do not fit records of shape \(4,\)"):
        Preprocessing([{"standardise": {"mean": [0, 0], "std": [1, 1]}}]).inputs(RAW)


def tiny_trainer(preprocessing) -> Trainer:
    inputs = RAW.astype("float32")
    network = Network(Input(4) + Dense(3) + SquaredDifference())
    network.preprocessing = preprocessing
    trainer = Trainer(network, build("optimiser", {"type": "sgd"}),
                      MinibatchIterator(from_arrays(inputs, inputs[:, :3]), 8), name="tiny")
    trainer.initialise(NumpyHandler("float32", seed=0))
    return trainer


def test_a_checkpoint_keeps_the_fitted_statistics_and_refuses_bad_ones(tmp_path):
    preprocessing = Preprocessing([{"standardise": True}])
    preprocessing(Dataset({"inputs": RAW}), fit=True)
    path = save_checkpoint(tiny_trainer(preprocessing), None, tmp_path / "a.ckpt")
    assert load_checkpoint(path).metadata["preprocess"] == json.loads(json.dumps(preprocessing.fitted()))
    bad = SimpleNamespace(fitted=lambda: [{"standardise": {"mean": [0.0] * 4, "std": [-1.0] * 4}}])
    path = save_checkpoint(tiny_trainer(bad), None, tmp_path / "bad.ckpt")  # a consistent file, checksum and all
    with pytest.raises(CheckpointError, match=r"checkpoint .*bad.ckpt: malformed \(data.preprocess.standardise: "
                                              r"mean and std must have one shape and std >= 0\)"):
        load_checkpoint(path)


def test_a_file_without_fitted_statistics_is_refused_by_load_in_one_line(tmp_path):
    """A checkpoint from before statistics were kept has only its run file's ``standardise = true``."""
    config = run_config.load(DIGITS, ["data.preprocess=[{standardise=true}]"])
    path = save_checkpoint(tiny_trainer(None), config, tmp_path / "old.ckpt")
    with pytest.raises(SigmaError, match="its run's preprocess transform 'standardise' takes statistics from the "
                                         r"training data, which this file \(written by an older Sigma\) does not hold"):
        sigma_core.load(path, "numpy")


def test_summary_reads_a_checkpoint(tmp_path, capsys):
    run = tmp_path / "run.toml"
    run.write_text(f"""
name = "tiny"
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 32
shape = [4]
classes = 3
preprocess = [{{ standardise = true }}, {{ shuffle = 1 }}]
[[network.layers]]
type = "input"
shape = [4]
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[training]
epochs = 1
[checkpoint]
directory = "{tmp_path.as_posix()}"
every_epochs = 1
""")
    assert main(["train", str(run), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["summary", str(run)]) == 0
    from_run_file = capsys.readouterr().out
    assert main(["summary", str(tmp_path / "tiny-e1-i0.ckpt")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(from_run_file) and "2-dense" in out
    fitted, trained = out.splitlines()[-2:]
    assert fitted.startswith('raw inputs go through its preprocess transforms, as fitted in training: standardise '
                             '{"mean": [') and fitted.endswith("; shuffle 1"), fitted  # the values, not only names
    assert trained == f"{tmp_path / 'tiny-e1-i0.ckpt'}: 1 epoch trained"  # the run had no metrics file
    assert main(["summary", str(tmp_path / "tiny-e1-i0.ckpt"), "--set", "seed=1"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("tiny-e1-i0.ckpt is a saved network")
    (tmp_path / "text.ckpt").write_text("not a checkpoint")
    assert main(["summary", str(tmp_path / "text.ckpt")]) == 2
    assert "truncated or corrupted" in capsys.readouterr().err.splitlines()[-1]

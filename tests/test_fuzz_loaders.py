"""Seeded mutation fuzzing of the core's loaders: run files, .npy/.npz and CSV (issue 10).

Each loader reads a few hundred mutants of a valid file (bit flips, truncations,
insertions, deletions; :func:`sigmann_testing.fuzz_loader`). Every outcome must
be a success or a SigmaError whose message names the file, never another
exception, and no mutant may make the loader hold more memory at once than the
file's size justifies. IDX files are fuzzed in sigmann-mnist's tests. The run-file
loader is also fuzzed property-based (hypothesis, issue 24): any bytes, and the
valid run file with values of any TOML kind, give a config or one ConfigError line.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sigmann_testing import fuzz_loader
from sigmann_testing.loaders import MUTANTS

from sigma_core import config, plugins
from sigma_core.data import load_numpy
from sigmann_csv import read_csv
from sigma_core.data.numpy_files import DEFLATE_RATIO
from sigma_core.errors import ConfigError, SigmaError
from sigma_core.run import build_run

RUN_FILE = """name = "fuzz"
seed = 0
[handler]
name = "numpy"
dtype = "float32"
[data]
extractor = "synthetic"
n = 40
shape = [2, 2]
classes = 3
[split]
validation = [30, 40]
[[network.layers]]
type = "input"
shape = [2, 2]
[[network.layers]]
type = "dense"
size = 5
activation = "relu"
[[network.layers]]
type = "dropout"
p = 0.1
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[initialisers]
"*.weights" = { type = "gaussian", std = 0.1, mean = 0.0 }
[optimiser]
type = "adam"
learning_rate = 0.01
beta1 = 0.9
freeze = ["2-dense.biases"]
[training]
batch_size = 8
epochs = 1
[[hooks]]
type = "stop"
at_epoch = 1
every = [1, "epoch"]
"""


def test_fuzz_run_files(tmp_path):
    plugins.components()  # discovery once, unmeasured: an unknown section ([splat]) asks which sections are registered
    fuzz_loader(tmp_path / "run.toml", RUN_FILE.encode(), config.load, seed=1, factor=64)


VALUES = ['"banana"', "-1", "0", "2.7", "nan", "-inf", "1e308", "true", "[]", "{}", '[0, "epoch"]', '"64"', "[2, -2]",
          '["*.nothing"]', '{ type = "constant" }', "99999999999"]


def test_fuzz_run_file_values_reach_one_clear_error_before_training(tmp_path):
    """Any value swapped for another kind of value: a SigmaError (naming the key), never a crash."""
    rng = random.Random(2)
    lines = RUN_FILE.splitlines()
    assignments = [i for i, line in enumerate(lines) if " = " in line]
    refused = 0
    for _ in range(MUTANTS):
        mutant = list(lines)
        for at in rng.sample(assignments, rng.randint(1, 2)):
            key = mutant[at].split(" = ")[0]
            mutant[at] = f"{key} = {rng.choice(VALUES)}"
        path = tmp_path / "run.toml"
        path.write_text("\n".join(mutant))
        try:
            build_run(config.load(path))
        except SigmaError:
            refused += 1
    assert refused >= MUTANTS // 2


def test_fuzz_npy(tmp_path):
    buffer = tmp_path / "valid.npy"
    np.save(buffer, np.linspace(0, 1, 60).reshape(20, 3))
    fuzz_loader(tmp_path / "x.npy", buffer.read_bytes(), load_numpy, seed=6, factor=4)


@pytest.mark.parametrize("compressed", [False, True])
def test_fuzz_npz(tmp_path, compressed):
    buffer = tmp_path / "valid.npz"
    arrays = {"inputs": np.linspace(0, 1, 60).reshape(20, 3), "targets": np.arange(20)}
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    # a deflated member may hold up to DEFLATE_RATIO times its size
    fuzz_loader(tmp_path / "x.npz", buffer.read_bytes(), load_numpy, seed=7, factor=DEFLATE_RATIO + 4 if compressed else 4)


def test_fuzz_csv(tmp_path):
    rng = np.random.default_rng(8)
    rows = "".join(f"{a:.3f},{b:.3f},{c:.1f},{label}\n" for (a, b, c), label in
                   zip(rng.normal(size=(40, 3)), rng.integers(0, 3, 40)))
    # Python floats in lists: some tens of bytes per cell, and a cell may be two bytes of the file
    fuzz_loader(tmp_path / "x.csv", rows.encode(), lambda path: list(read_csv(path)), seed=9, factor=48)


# -- property-based: any bytes, and run files of any values, through the run-file loader ---------------------------

FUZZ = settings(max_examples=300, deadline=None, database=None, derandomize=True,  # the same cases on every machine
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: TOML values of every kind, nested: what a run file's key may be given.
TOML_VALUES = st.recursive(
    st.one_of(st.integers().map(str), st.floats().map(repr),
              st.booleans().map(lambda b: str(b).lower()), st.text(max_size=8).map(lambda t: json.dumps(t)),
              st.sampled_from(["nan", "-inf", "+inf", "1979-05-27", "0x10", "1_000", '"*.weights"', '"epoch"'])),
    lambda inner: st.one_of(st.lists(inner, max_size=3).map(lambda items: f"[{', '.join(items)}]"),
                            st.dictionaries(st.sampled_from(["type", "size", "std", "x", "every", "p"]), inner,
                                            max_size=3).map(lambda t: "{ " + ", ".join(f"{k} = {v}" for k, v in
                                                                                        t.items()) + " }")),
    max_leaves=6)


def load_or_refuse(path, data: bytes):
    """The loader's outcome: a validated config, or a ConfigError of one line naming the file; nothing else."""
    path.write_bytes(data)
    try:
        cfg = config.load(path)
    except ConfigError as error:
        assert "\n" not in str(error) and str(path) in str(error), str(error)
        return None
    assert isinstance(cfg, dict) and {"name", "data", "network", "training"} <= set(cfg)
    return cfg


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode)))
def test_any_bytes_are_a_run_file_or_one_line(tmp_path, data):
    load_or_refuse(tmp_path / "run.toml", data)


@FUZZ
@given(swaps=st.lists(st.tuples(st.integers(0, 10**6), TOML_VALUES), min_size=1, max_size=4),
       drops=st.lists(st.integers(0, 10**6), max_size=3))
def test_any_values_in_a_run_file_are_a_run_file_or_one_line(tmp_path, swaps, drops):
    """RUN_FILE with values swapped for TOML values of any kind and lines dropped: the loader never crashes."""
    lines = RUN_FILE.splitlines()
    assignments = [i for i, line in enumerate(lines) if " = " in line]
    for at, value in swaps:
        index = assignments[at % len(assignments)]
        lines[index] = f"{lines[index].split(' = ')[0]} = {value}"
    for at in drops:
        del lines[at % len(lines)]
    load_or_refuse(tmp_path / "run.toml", "\n".join(lines).encode())

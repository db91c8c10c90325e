"""``sigma train --print-config``: the run file with every component's default filled in, as TOML (tomli_w)."""

from __future__ import annotations

import math
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sigmann_help import config_toml
from sigma_core.cli import main

#: How this file's run differs from the testing kit's blobs run: Adam, standardised data, one initialiser.
CHANGES = ("data.n=40", "data.preprocess=[{standardise=true}]", 'optimiser.type="adam"', "optimiser.learning_rate=0.01",
           'initialisers={"*.weights"={type="gaussian",std=0.1}}')


def shown(capsys, *arguments) -> tuple[int, str, str]:
    status = main(list(arguments))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def run_file(sigma_run_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return sigma_run_file(*CHANGES)


def test_print_config_fills_in_every_default_and_trains_nothing(run_file, capsys):
    status, out, _ = shown(capsys, "train", str(run_file), "--print-config", "--set", "training.batch_size=4",
                           "--monitor", "metrics:every=3", "--handler", "numpy")
    assert status == 0
    assert not (run_file.parent / "runs").exists()  # nothing trained, nothing written
    printed = tomllib.loads(out)
    assert printed["optimiser"] == {"type": "adam", "learning_rate": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                    "weight_decay": 0.0, "freeze": []}
    assert printed["network"]["layers"][1] == {"type": "dense", "size": 3, "activation": "none", "bias": True,
                                               "time_distributed": False}
    assert printed["initialisers"] == {"*.weights": {"type": "gaussian", "std": 0.1, "mean": 0.0}}
    assert printed["data"] == {"extractor": "synthetic", "n": 40, "shape": 5, "classes": 3, "seed": 0,
                               "preprocess": [{"standardise": True}]}
    assert printed["training"]["batch_size"] == 4 and printed["training"]["validation_batch_size"] == 1000
    assert printed["checkpoint"] == {"directory": "checkpoints", "every_iterations": 0, "every_epochs": 0, "keep": 3}
    assert printed["hooks"] == [{"type": "metrics", "every": 3, "values": []}]  # --monitor's, its defaults too
    assert out.startswith("# hooks[0].directory: unset\n\n")  # TOML has no null: an unset default is a comment
    assert printed["operator"] == {"type": "single_worker"} and printed["handler"]["name"] == "numpy"


def test_the_printed_config_is_a_run_file_that_prints_itself(run_file, tmp_path, capsys):
    status, first, _ = shown(capsys, "train", str(run_file), "--print-config", "--monitor", "metrics")
    assert status == 0
    saved = tmp_path / "printed.toml"
    saved.write_text(first)
    status, second, _ = shown(capsys, "train", str(saved), "--print-config")
    assert (status, second) == (0, first)
    assert shown(capsys, "train", str(saved), "--quiet")[0] == 0  # and it trains


@pytest.mark.parametrize("before, after, message", [
    ("learning_rate = 0.01", "learning_rat = 0.01", "error: unknown key optimiser.learning_rat for optimiser 'adam'; "
     "allowed: type, learning_rate, beta1, beta2, eps, weight_decay, freeze\n"),
    ("size = 3", "size = 0", "error: network.layers[1].size: expected an integer >= 1, got 0\n"),
    ('type = "gaussian"', 'type = "gausian"', "error: initialisers.\"*.weights\".type: unknown initialiser 'gausian' "
     "(did you mean 'gaussian'? available: "),
])
def test_print_config_refuses_a_bad_component_table_in_one_line_naming_it(run_file, capsys, before, after, message):
    text = run_file.read_text()
    assert before in text
    run_file.write_text(text.replace(before, after))
    status, out, err = shown(capsys, "train", str(run_file), "--print-config")
    assert (status, out) == (2, "")
    assert err.startswith(message) and err.count("\n") == 1


KEYS = st.text(max_size=8)  # any key: bare where TOML allows, quoted otherwise
SCALARS = (st.text(alphabet=st.characters(exclude_categories=("Cs",))) | st.booleans()  # no lone surrogates: not text
           | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=12)


@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_config_toml_reads_back_as_the_same_tables(table):
    assert tomllib.loads(config_toml(table)) == table


def test_config_toml_writes_unset_and_non_toml_values_as_comments_naming_them():
    text = config_toml({"a": None, "t": {"b": None, "c": 1}, "inline": [{"x": None, "y": 2}, 3], "f": math.inf,
                        "odd": object, "holes": [1, None], "*.w": {"m": None}})
    assert tomllib.loads(text) == {"t": {"c": 1}, "inline": [{"y": 2}, 3], "f": math.inf, "*.w": {}}
    assert text.splitlines()[:7] == ["# a: unset", "# t.b: unset", "# inline[0].x: unset", "# odd: <class 'object'>",
                                     "# holes: [1, None]", '# "*.w".m: unset', ""]  # an array is kept whole or not

"""Training end to end: determinism, the digits example, ``sigma train`` errors and overrides, NaN detection."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy
import pytest

from sigma_core import Hook, NumpyHandler, build
from sigma_core import config as run_config
from sigma_core.cli import main
from sigma_core.model.constructs import Dense, Input, SoftmaxCE, SquaredDifference
from sigma_core.errors import ArchitectureError, ConfigError, NonFiniteError, SigmaError
from sigma_core.model.network import Network
from sigma_core.run import build_run
from sigma_core.training.trainer import Trainer

DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits.toml"


def digits_raw(**changes) -> dict:
    raw = tomllib.loads(DIGITS.read_text())
    raw["handler"]["name"] = "numpy"
    for dotted, value in changes.items():
        run_config.apply_override(raw, f"{dotted.replace('__', '.')}={json.dumps(value)}")
    return raw


class IterationLog(Hook):
    """A hook that records every iteration's cost."""

    def __init__(self):
        super().__init__()
        self.costs: list[float] = []
        self.epochs = 0

    def on_iteration(self):
        self.costs.append(self.run.values["cost"])

    def on_epoch(self, report):
        self.epochs += 1


def train_losses(raw: dict) -> tuple[list[float], dict]:
    run = build_run(run_config.validate(raw))
    log = IterationLog()
    summary = run.train([log])
    assert log.epochs == summary["epochs"]
    return log.costs, summary


# -- determinism --------------------------------------------------------------------------------------


def test_same_seed_gives_bit_identical_losses():
    first, first_summary = train_losses(digits_raw(training__epochs=2, seed=7))
    second, second_summary = train_losses(digits_raw(training__epochs=2, seed=7))
    assert len(first) == 2 * 45  # 1437 training records in batches of 32, last batch kept
    assert all(numpy.isfinite(first))
    assert first == second
    assert first_summary["accuracy"] == second_summary["accuracy"]
    assert first[-1] < first[0]  # and it learns


def test_different_seeds_give_different_losses():
    first, _ = train_losses(digits_raw(training__epochs=2, seed=7))
    other, _ = train_losses(digits_raw(training__epochs=2, seed=8))
    assert len(first) == len(other)
    assert first != other


# -- the digits example ---------------------------------------------------------------------------------


def test_digits_example_reaches_95_percent_through_the_cli(tmp_path, capsys):
    out = tmp_path / "nested" / "result.json"
    assert main(["train", str(DIGITS), "--quiet", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "held-out accuracy" in stdout
    summary = json.loads(out.read_text())
    for key in ("handler", "dtype", "epochs", "seconds", "cost", "accuracy"):
        assert key in summary, key
    assert summary["dtype"] == "float32"
    assert summary["epochs"] == 20
    assert isinstance(summary["handler"], str) and summary["handler"]
    assert summary["seconds"] > 0
    assert numpy.isfinite(summary["cost"])
    assert summary["accuracy"] >= 0.95
    assert summary["parameters"] == 9610
    assert len(summary["history"]) == 20
    assert f"{summary['accuracy']:.2%}" in stdout
    assert not list(out.parent.glob(".*"))  # no temporary file left behind


# -- sigma train: one error line, exit 2 --------------------------------------------------------------------


def run_bad(capsys, *argv) -> str:
    """Run ``sigma train`` expecting a user error; return its one stderr line."""
    code = main(["train", *argv])
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    assert captured.out == ""
    return lines[0]


def write(tmp_path, text: str, name="run.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


BASE = DIGITS.read_text()

LAYERS_TAIL = BASE[BASE.index("[[network.layers]]"):BASE.index("[initialisers]")]


def with_layers(layers_toml: str) -> str:
    """The digits run file with its layer list replaced."""
    return BASE.replace(LAYERS_TAIL, layers_toml + "\n")


def test_unknown_top_level_key(tmp_path, capsys):
    line = run_bad(capsys, write(tmp_path, "epochz = 3\n" + BASE))
    assert "unknown key epochz;" in line and "run.toml" in line


def test_unknown_training_key(tmp_path, capsys):
    line = run_bad(capsys, write(tmp_path, BASE.replace("epochs = 20", "epochs = 20\nlearnign_rate = 0.1")))
    assert "training.learnign_rate" in line
    assert "batch_size" in line  # the allowed keys are listed


def test_unknown_layer_type(tmp_path, capsys):
    line = run_bad(capsys, write(tmp_path, BASE.replace('type = "dropout"', 'type = "dropuot"')))
    assert "dropuot" in line
    for available in ("dense", "dropout", "softmax_ce"):
        assert available in line


def test_unknown_handler(capsys):
    line = run_bad(capsys, str(DIGITS), "--handler", "nope")
    assert "'nope'" in line
    assert "numpy" in line  # lists the available handlers


def test_shape_mismatch(tmp_path, capsys):
    layers = """
[[network.layers]]
type = "input"
shape = [64]
name = "pixels"

[[network.layers]]
type = "dense"
size = 16
name = "narrow"
inputs = ["pixels"]

[[network.layers]]
type = "dense"
size = 32
name = "wide"
inputs = ["pixels"]

[[network.layers]]
type = "add"
name = "merge"
inputs = ["narrow", "wide"]

[[network.layers]]
type = "dense"
size = 10

[[network.layers]]
type = "softmax_ce"
"""
    line = run_bad(capsys, write(tmp_path, with_layers(layers)))
    assert "'merge'" in line and "(16,)" in line and "(32,)" in line


def test_cycle(tmp_path, capsys):
    layers = """
[[network.layers]]
type = "input"
shape = [64]
name = "pixels"

[[network.layers]]
type = "dense"
size = 10
name = "first"
inputs = ["pixels", "second"]

[[network.layers]]
type = "dense"
size = 10
name = "second"
inputs = ["first"]

[[network.layers]]
type = "softmax_ce"
"""
    line = run_bad(capsys, write(tmp_path, with_layers(layers)))
    assert "cycle" in line and "first" in line and "second" in line


def test_unknown_layer_parameter(tmp_path, capsys):
    line = run_bad(capsys, write(tmp_path, BASE.replace("size = 128", "size = 128\nactivaton = \"relu\"")))
    assert "activaton" in line and "activation" in line  # the misspelt key and the right one


def test_unknown_optimiser(capsys):
    line = run_bad(capsys, str(DIGITS), "--set", "optimiser.type=adamm")
    assert "adamm" in line


def test_invalid_toml(tmp_path, capsys):
    line = run_bad(capsys, write(tmp_path, BASE + "\n[training\nbroken = \n"))
    assert "not valid TOML" in line and "run.toml" in line


def test_missing_file(tmp_path, capsys):
    missing = tmp_path / "absent.toml"
    line = run_bad(capsys, str(missing))
    assert "absent.toml" in line


def test_wrong_value_type_from_set(capsys):
    line = run_bad(capsys, str(DIGITS), "--set", "training.epochs=many")
    assert "training.epochs" in line and "'many'" in line


def test_malformed_set(capsys):
    line = run_bad(capsys, str(DIGITS), "--set", "training.epochs")
    assert "key=value" in line


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_exception_instead(tmp_path, capsys, where):
    path = write(tmp_path, "epochz = 3\n" + BASE)
    argv = ["--debug", "train", path] if where == "before" else ["train", path, "--debug"]
    with pytest.raises(ConfigError, match="epochz"):
        main(argv)


def test_debug_on_a_graph_error(tmp_path):
    path = write(tmp_path, BASE.replace('type = "dropout"', 'type = "dropuot"'))
    with pytest.raises(ArchitectureError, match="dropuot"):
        main(["--debug", "train", path])


def test_cli_subprocess_prints_one_line_and_exits_2(tmp_path):
    import subprocess
    import sys

    path = write(tmp_path, "epochz = 3\n" + BASE)
    result = subprocess.run(
        [sys.executable, "-m", "sigma_core", "train", path], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: ") and "epochz" in result.stderr
    assert "Traceback" not in result.stderr


# -- overrides --------------------------------------------------------------------------------------


def test_set_overrides_epochs_and_other_values(tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = [
        "train", str(DIGITS), "--quiet", "--out", str(out),
        "--set", "training.epochs=1",
        "--set", "training.batch_size=128",
        "--set", 'name="renamed"',
        "--set", "optimiser.learning_rate=0.01",
        "--dtype", "float64",
    ]
    assert main(argv) == 0
    summary = json.loads(out.read_text())
    assert summary["epochs"] == 1 and len(summary["history"]) == 1
    assert summary["name"] == "renamed"
    assert summary["dtype"] == "float64"
    assert capsys.readouterr().out.startswith("renamed: 1 epoch in ")


@pytest.mark.parametrize(
    "text, expected",
    [("3", 3), ("0.25", 0.25), ("-2", -2), ('"adam"', "adam"), ("adam", "adam"), ("true", True),
     ("[1, 2]", [1, 2]), ("1e-3", 1e-3), ("{ type = \"sgd\" }", {"type": "sgd"})],
)
def test_set_values_are_parsed_as_toml(text, expected):
    raw = {}
    run_config.apply_override(raw, f"optimiser.value={text}")
    value = raw["optimiser"]["value"]
    assert value == expected and type(value) is type(expected)


def test_set_reaches_the_validated_config(tmp_path):
    cfg = run_config.load(DIGITS, ["training.epochs=1", "optimiser.type=sgd", "optimiser.learning_rate=0.5",
                                   "split.validation=0.3", "handler.dtype=float64"])
    assert cfg["training"]["epochs"] == 1 and type(cfg["training"]["epochs"]) is int
    assert cfg["optimiser"] == {"type": "sgd", "learning_rate": 0.5}
    assert cfg["split"]["validation"] == 0.3
    assert cfg["handler"]["dtype"] == "float64"
    assert cfg["training"]["batch_size"] == 32  # untouched keys keep their values
    with pytest.raises(ConfigError, match=r"network.layers is a list of 5; .size. is not an index 0..4"):
        run_config.load(DIGITS, ["network.layers.size=3"])


# -- non-finite costs ----------------------------------------------------------------------------------------


def nan_trainer(batches, learning_rate=0.1):
    network = Network(Input(4) + Dense(3) + SquaredDifference())
    trainer = Trainer(network, build("optimiser", {"type": "sgd", "learning_rate": learning_rate}), batches)
    trainer.initialise(NumpyHandler("float32", seed=0))
    return trainer


class CountingHandler(NumpyHandler):
    """Counts reads of handler data to the host (the device-to-host copies a GPU handler would wait for)."""

    reads = 0

    def to_numpy(self, array):
        self.reads += 1
        return super().to_numpy(array)


def test_the_cost_is_read_to_the_host_once_per_epoch_not_every_step():
    rng = numpy.random.default_rng(0)
    batches = [{"inputs": rng.normal(size=(8, 4)), "targets": rng.normal(size=(8, 3))} for _ in range(5)]
    trainer = nan_trainer(batches)
    trainer.initialise(CountingHandler("float64", seed=0))
    costs = []
    mean = trainer.run_epoch()
    assert trainer.handler.reads == 1  # the epoch mean; the per-step finiteness check is an op, not a read
    trainer.run_epoch(on_iteration=lambda t: costs.append(t.last_cost))  # the cost, read when asked
    assert trainer.handler.reads == 1 + 5 + 1
    assert trainer.epoch_cost == pytest.approx(sum(costs), rel=1e-15) and numpy.isfinite(mean)
    assert float(trainer.run_iteration(batches[0])) == trainer.last_cost


def test_diverging_training_raises_non_finite_error():
    rng = numpy.random.default_rng(0)
    batches = [{"inputs": rng.normal(0, 1e3, (8, 4)), "targets": rng.normal(0, 1e3, (8, 3))} for _ in range(5)]
    trainer = nan_trainer(batches, learning_rate=1e3)
    with pytest.raises(NonFiniteError, match=r"epoch \d+, iteration \d+") as error, numpy.errstate(all="ignore"):
        for _ in range(20):
            trainer.run_epoch()
    assert isinstance(error.value, SigmaError)
    assert "cost became" in str(error.value)


class NaNOnSecondEpoch:
    """Three clean batches; on the second pass, the third batch holds a NaN."""

    def __init__(self):
        rng = numpy.random.default_rng(1)
        self.batches = [{"inputs": rng.normal(size=(4, 4)), "targets": rng.normal(size=(4, 3))} for _ in range(3)]
        self.passes = 0

    def __len__(self):
        return 3

    def __iter__(self):
        self.passes += 1
        for i, batch in enumerate(self.batches):
            if self.passes == 2 and i == 2:
                batch = dict(batch, inputs=batch["inputs"].copy())
                batch["inputs"][1, 2] = numpy.nan
            yield batch


def test_nan_input_names_epoch_iteration_and_the_batch_value():
    trainer = nan_trainer(NaNOnSecondEpoch())
    assert numpy.isfinite(trainer.run_epoch())
    with pytest.raises(NonFiniteError, match=r"epoch 2, iteration 3; the batch's 'inputs' hold nan at index \[1, 2\]"):
        trainer.run_epoch()


def test_nan_injected_into_a_weight_names_the_parameter():
    batches = [{"inputs": numpy.ones((4, 4)), "targets": numpy.zeros((4, 3))}] * 3
    trainer = nan_trainer(batches)
    trainer.run_epoch()
    weights = trainer.network.parameters["2-dense.weights"]
    poisoned = weights.to_numpy()
    poisoned[3, 1] = numpy.inf
    weights.handler.fill(weights, weights.handler.asarray(poisoned))
    with pytest.raises(NonFiniteError, match=r"epoch 2, iteration 1; parameter '2-dense.weights' holds -?(nan|inf) "
                                             r"at index \[\d+, \d+\]"), numpy.errstate(all="ignore"):
        trainer.run_epoch()


IRIS = Path(__file__).resolve().parent.parent / "examples" / "iris.toml"


def test_nan_in_a_weight_through_the_cli_is_one_line_naming_the_parameter(tmp_path, capsys):
    text = IRIS.read_text().replace('[initialisers]\n', '[initialisers]\n"2-dense.weights" = { type = "constant", value = nan }\n')
    assert "value = nan" in text
    with numpy.errstate(all="ignore"):
        code = main(["train", write(tmp_path, text), "--quiet"])
    last = capsys.readouterr().err.splitlines()[-1]
    assert code == 2  # refused when the run file is read, or when the cost becomes NaN: either way, one line
    assert last.startswith("error: ") and "2-dense.weights" in last and "nan" in last


def test_nan_through_the_cli_is_an_error_line_not_a_traceback(tmp_path, capsys):
    path = write(tmp_path, BASE.replace('type = "adam"\nlearning_rate = 0.003', 'type = "sgd"\nlearning_rate = 1e30'))
    with numpy.errstate(all="ignore"):
        code = main(["train", path, "--quiet"])
    captured = capsys.readouterr()
    assert code == 2
    # training had started (the handler and run lines were logged); the error is the last line
    last = captured.err.splitlines()[-1]
    assert last.startswith("error: ") and "epoch 1, iteration" in last
    assert "Traceback" not in captured.err


def test_nan_in_a_later_layer_is_named_exactly_and_no_parameter_changes():
    """The cost is checked before the update: the bad weight is the one named, the rest stay as they were."""
    network = Network(Input(4) + Dense(5, "tanh") + Dense(3) + SquaredDifference())
    trainer = Trainer(network, build("optimiser", {"type": "sgd", "learning_rate": 0.1}),
                      [{"inputs": numpy.ones((4, 4)), "targets": numpy.zeros((4, 3))}])
    trainer.initialise(NumpyHandler("float32", seed=0))
    weights = network.parameters["3-dense.weights"]
    poisoned = weights.to_numpy()
    poisoned[2, 1] = numpy.nan
    weights.handler.fill(weights, weights.handler.asarray(poisoned))
    before = network.state_dict()
    with pytest.raises(NonFiniteError, match=r"parameter '3-dense.weights' holds nan at index \[2, 1\]"), \
            numpy.errstate(all="ignore"):
        trainer.run_epoch()
    after = network.state_dict()
    for pid in before:
        numpy.testing.assert_array_equal(after[pid], before[pid])


def test_evaluate_ranks_once_per_parameter_state_and_counts_top_k():
    """The operator's epoch evaluation and a scorer at the same moment share one pass."""
    from sigma_core.data import MinibatchIterator
    from sigmann_sklearn.datasets import load_sklearn

    digits = load_sklearn("digits")
    network = Network(Input(64) + Dense(10) + SoftmaxCE())
    trainer = Trainer(network, build("optimiser", {"type": "sgd", "learning_rate": 0.001}),
                      MinibatchIterator(digits, 100, seed=0))
    trainer.initialise(NumpyHandler("float64", seed=0))
    held_out = MinibatchIterator(digits.take(0, 300), 100, shuffle=False)
    passes = []
    forward = network.forward
    network.forward = lambda *a, **k: passes.append(1) or forward(*a, **k)
    first = trainer.evaluate(held_out, top=(1, 3))
    again = trainer.evaluate(held_out, top=(1, 2, 3, 10))
    assert len(passes) == 3  # three batches, one pass
    assert again["top1"] == first["top1"] and again["top3"] == first["top3"]
    assert first["top1"] <= again["top2"] <= again["top3"] <= again["top10"] == 1.0
    trainer.run_iteration(next(iter(trainer.training_iterator)))
    trainer.evaluate(held_out)
    assert len(passes) == 3 + 1 + 3  # the step's forward, then a fresh pass


def test_evaluate_takes_integer_targets_per_time_step_as_class_indices():
    """Integer (N, T) targets are one class per step, not one-hot rows to argmax (a character model's labels)."""
    rng = numpy.random.default_rng(0)
    inputs = rng.normal(size=(6, 4, 3))
    targets = rng.integers(0, 5, size=(6, 4))
    network = Network(Input(4, 3) + Dense(8, "tanh", time_distributed=True) + Dense(5, time_distributed=True) + SoftmaxCE())
    trainer = Trainer(network, build("optimiser", {"type": "sgd"}), [])
    trainer.initialise(NumpyHandler("float64", seed=0))
    report = trainer.evaluate([{"inputs": inputs, "targets": targets}], top=(1, 5))
    assert report["records"] == 24 and report["top5"] == 1.0
    logits = network.predict(inputs).reshape(-1, 5)
    assert report["top1"] == numpy.mean(logits.argmax(-1) == targets.reshape(-1))

"""The shipped examples and the third-party layer plugin, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sigma_core import plugins
from sigma_core.model.architecture import Construct
from sigma_core.compute.backend import create_handler
from sigma_core.cli import main
from sigma_core.model.constructs import Input, SoftmaxCE
from sigma_core.data import MinibatchIterator
from sigma_core.model.network import Network
from sigma_core.training.optimisers import Adam
from sigma_core.training.trainer import Trainer
from sigmann_sklearn.datasets import load_sklearn

ROOT = Path(__file__).resolve().parents[1]
# The real MNIST test set, beside the checkout (../shared) or at the workplace's fixed path.
MNIST = next(
    (p for p in (ROOT.parent / "shared" / "data" / "mnist", Path("/work/shared/data/mnist")) if p.exists()),
    ROOT.parent / "shared" / "data" / "mnist",
)


def available_handlers() -> list[str]:
    return [c.name for c in plugins.components("handler") if c.availability()[0]]


def train_example(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    assert main(["train", str(ROOT / "examples" / f"{name}.toml"), "--quiet", "--out", str(out), *extra]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("name, floor", [("iris", 0.9), ("xor", 1.0)])
def test_small_examples_learn(tmp_path, name, floor):
    result = train_example(tmp_path, name)
    assert result["accuracy"] >= floor


@pytest.mark.slow
@pytest.mark.skipif(not MNIST.exists(), reason="the MNIST test set is not at ../shared/data/mnist")
def test_mnist_example_reaches_95_percent_in_10_epochs(tmp_path):
    """Sigma's README network, trained on the first 8,000 test images, scored on the last 2,000."""
    result = train_example(tmp_path, "mnist", "--set", f"data.directory={MNIST}", "--handler", "numpy")
    assert result["epochs"] == 10
    assert result["accuracy"] >= 0.95


def test_maxout_plugin_is_discovered_from_its_distribution():
    component = plugins.get("layer", "maxout")
    assert component.distribution == "sigmann-maxout"


@pytest.mark.parametrize("handler_name", available_handlers())
def test_maxout_plugin_layer_trains_on_every_handler(handler_name):
    handler = create_handler(handler_name, dtype="float32", seed=0)
    train, held_out = load_sklearn("digits").split(0.8, 0.2, seed=0)
    train = train.with_section("inputs", train.section("inputs") / 16.0)
    held_out = held_out.with_section("inputs", held_out.section("inputs") / 16.0)
    network = Network(Input(64) + Construct("maxout", size=32, pieces=3) + Construct("dense", size=10) + SoftmaxCE())
    assert network.layers["2-maxout"].output_shape == (32,)
    trainer = Trainer(network, Adam(0.01), MinibatchIterator(train, 32, seed=0))
    trainer.initialise(handler)
    for _ in range(5):
        trainer.run_epoch()
    report = trainer.evaluate(MinibatchIterator(held_out, 1000, shuffle=False))
    assert report["accuracy"] >= 0.9


def test_training_step_allocates_nothing_after_warm_up():
    """Sigma's sessions: a step of unchanged shapes reuses the previous step's buffers."""
    handler = create_handler("numpy", dtype="float32", seed=0)
    dataset = load_sklearn("digits")
    network = Network(Input(64) + Construct("dense", size=32, activation="relu") + Construct("dropout", p=0.2)
                      + Construct("dense", size=10) + SoftmaxCE())
    trainer = Trainer(network, Adam(0.01), MinibatchIterator(dataset, 50, last_batch="drop", seed=0))
    trainer.initialise(handler)
    batches = iter(trainer.training_iterator)
    for _ in range(2):
        trainer.run_iteration(next(batches))
    before = handler.allocations
    for _ in range(10):
        trainer.run_iteration(next(batches))
    assert handler.allocations == before
    assert before > 0  # the warm-up did allocate, so the counter is live
    assert np.isfinite(trainer.last_cost)

"""Issue 10, item 5: a binary classifier with one output column trains on (batch,) labels.

Before the fix the cost layer turned the labels into one row: "predictions
shape (72, 1) and targets shape (1, 72) differ". Needs scikit-learn (for its
bundled breast-cancer data), so it lives apart from the core's tests.
"""

from __future__ import annotations

import numpy
import pytest
from sklearn import datasets

from sigma_core import NumpyHandler
from sigma_core.model.constructs import Dense, Input, SquaredDifference
from sigma_core.data.dataset import Dataset
from sigma_core.data.iterators import MinibatchIterator, UndividedIterator
from sigma_core.model.network import Network
from sigma_core.training.optimisers import Adam
from sigma_core.training.trainer import Trainer


@pytest.mark.parametrize("handler_name", ["numpy", "cpu"])
def test_dense_1_binary_classifier_trains_on_breast_cancer(handler_name):
    data = datasets.load_breast_cancer()
    inputs = (data.data - data.data.mean(axis=0)) / data.data.std(axis=0)
    labels = data.target  # shape (569,), int64 0/1
    assert labels.shape == (569,)
    order = numpy.random.default_rng(0).permutation(len(labels))
    train, test = order[:450], order[450:]
    network = Network(Input(30) + Dense(1, "sigmoid") + SquaredDifference())
    trainer = Trainer(
        network, Adam(0.01), MinibatchIterator(Dataset({"inputs": inputs[train], "targets": labels[train]}), 72, seed=0),
    )
    if handler_name == "cpu":
        from sigma_cpu.handler import NumbaHandler

        handler = NumbaHandler("float32", seed=0)
    else:
        handler = NumpyHandler("float32", seed=0)
    trainer.initialise(handler)
    first = trainer.run_epoch()
    for _ in range(14):
        last = trainer.run_epoch()
    assert last < first / 2
    report = trainer.evaluate(UndividedIterator(Dataset({"inputs": inputs[test], "targets": labels[test]})))
    assert report["records"] == 119 and report["accuracy"] > 0.93

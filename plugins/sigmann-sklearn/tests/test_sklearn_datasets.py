"""sigmann-sklearn: scikit-learn's bundled datasets, directly and by name from a run file's data block."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sigma_core import plugins
from sigma_core.data import DataError, dataset_from_config
from sigmann_sklearn.datasets import load_sklearn


def test_load_sklearn_gives_float_inputs_and_integer_labels():
    digits = load_sklearn("digits")
    assert digits.section("inputs").shape == (1797, 64)
    assert np.issubdtype(digits.section("inputs").dtype, np.floating)
    assert set(np.unique(digits.section("targets"))) == set(range(10))
    assert len(load_sklearn("wdbc")) == 569
    with pytest.raises(DataError, match="unknown scikit-learn dataset 'mnist'; available: digits, iris"):
        load_sklearn("mnist")


@pytest.mark.parametrize("name, records", [("iris", 150), ("wdbc", 569), ("breast_cancer", 569), ("digits", 1797)])
def test_named_datasets_by_source(name, records):
    assert len(dataset_from_config({"source": name})) == records


def test_sklearn_source_takes_a_name_and_preprocessing():
    iris = dataset_from_config({"extractor": "sklearn", "name": "iris", "preprocess": {"standardise": True}, "one_hot": 3})
    np.testing.assert_allclose(iris.section("inputs").mean(axis=0), 0, atol=1e-9)
    assert iris.section("targets").shape == (150, 3)


def test_extractors_come_from_this_distribution():
    plugins.reset()
    for name in ("sklearn", "digits", "iris", "wdbc"):
        assert plugins.get("extractor", name).distribution == "sigmann-sklearn"
    assert plugins.get("extractor", "breast_cancer").name == "wdbc"


def test_discovery_imports_neither_numpy_nor_scikit_learn():
    code = ("import sys, sigma_core.plugins as p; p.get('extractor', 'digits'); "
            "print(sorted(m for m in ('numpy', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

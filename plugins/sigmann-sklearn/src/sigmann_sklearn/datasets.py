"""scikit-learn's bundled toy datasets (no download) as Sigma datasets.

scikit-learn is imported inside :func:`load_sklearn` only: it takes about a
second, which a run that never reads these datasets should not pay.
"""

from __future__ import annotations

import numpy as np

from sigma_core import DataError, Dataset

# Sigma name -> scikit-learn loader suffix. ``wdbc`` is the UCI name the
# original Sigma used for the Wisconsin breast-cancer data.
SKLEARN_DATASETS = {
    "digits": "digits",
    "iris": "iris",
    "breast_cancer": "breast_cancer",
    "wdbc": "breast_cancer",
    "wine": "wine",
}


def load_sklearn(name: str) -> Dataset:
    """Load a bundled scikit-learn dataset: float ``inputs`` (N, features), integer ``targets`` (N,)."""
    if name not in SKLEARN_DATASETS:
        raise DataError(f"unknown scikit-learn dataset {name!r}; available: {', '.join(SKLEARN_DATASETS)}")
    from sklearn import datasets

    canonical = SKLEARN_DATASETS[name]
    inputs, targets = getattr(datasets, f"load_{canonical}")(return_X_y=True)
    return Dataset({"inputs": inputs.astype(np.float64), "targets": targets.astype(np.int64)}, canonical)


def iris() -> Dataset:
    """Fisher's 150 irises: 4 measurements, 3 species."""
    return load_sklearn("iris")


def wdbc() -> Dataset:
    """Wisconsin diagnostic breast cancer: 569 records, 30 features, malignant or benign."""
    return load_sklearn("wdbc")


def digits() -> Dataset:
    """1,797 8×8 handwritten digits, pixel values 0-16."""
    return load_sklearn("digits")

"""scikit-learn's bundled toy datasets (no download) as Sigma datasets.

scikit-learn is imported inside :func:`load_sklearn` only, so importing the
data package stays cheap for runs that never touch these datasets.
"""

from __future__ import annotations

import numpy as np

from sigma_core.data.dataset import Dataset
from sigma_core.data.errors import DataError

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

"""Array transforms applied to whole sections: one-hot, normalise, standardise.

These are plain functions from array to array so that a :class:`Dataset`, the
run-file loader and, later, extractor plugins can all share them. Statistics
are computed from the array they are given, never stored: the minimal data path
has no fitted preprocessors.
"""

from __future__ import annotations

import numpy as np

from sigma_core.data.errors import DataError


def one_hot(labels, classes: int, *, name: str = "labels") -> np.ndarray:
    """Encode integer ``labels`` as float32 rows of ``classes`` columns.

    Labels of shape ``(N,)`` or ``(N, 1)`` give ``(N, classes)``. A label
    outside ``0..classes-1`` raises :class:`DataError` naming it, rather than
    silently wrapping or producing an all-zero row. ``name`` only labels the
    messages (the caller passes the section name).
    """
    labels = np.asarray(labels)
    if classes < 1:
        raise DataError(f"{name}: one-hot needs at least 1 class, got {classes}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{name}: one-hot needs integer labels, got dtype {labels.dtype}")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    outside = (labels < 0) | (labels >= classes)
    if outside.any():
        label = labels[outside].flat[0]
        raise DataError(f"{name}: label {label} is outside 0..{classes - 1} ({classes} classes)")
    return np.eye(classes, dtype=np.float32)[labels]


def normalise(values, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """Rescale linearly so the array's overall min maps to ``low`` and max to ``high``.

    One min and max for the whole array (not per feature), which is what image
    data such as MNIST wants. A constant array maps to ``low``.
    """
    if not low < high:
        raise DataError(f"normalise: low ({low}) must be below high ({high})")
    values = np.asarray(values, dtype=np.result_type(np.asarray(values).dtype, np.float32))
    lo, hi = values.min(), values.max()
    scale = (high - low) / (hi - lo) if hi > lo else 0.0
    return (values - lo) * scale + low


def standardise(values) -> np.ndarray:
    """Shift and scale each feature (over axis 0) to mean 0 and standard deviation 1.

    A feature that never varies is only centred, so it does not become NaN.
    """
    values = np.asarray(values, dtype=np.result_type(np.asarray(values).dtype, np.float32))
    std = values.std(axis=0)
    return (values - values.mean(axis=0)) / np.where(std > 0, std, 1)

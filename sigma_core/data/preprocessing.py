"""Array transforms applied to whole sections: one-hot, normalise, standardise, permute.

These are plain functions from array to array so that a :class:`Dataset`, the
run-file loader and extractor plugins can all share them. Statistics are
computed from the array they are given, never stored. Shuffling reorders
records, so it lives on :class:`~sigma_core.data.dataset.Dataset` (one
permutation for every section), not here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sigma_core.data.errors import DataError


def _float(values) -> np.ndarray:
    values = np.asarray(values)
    return values.astype(np.result_type(values.dtype, np.float32), copy=False)


def one_hot(labels, classes: int, *, name: str = "labels") -> np.ndarray:
    """Encode integer ``labels`` as float32 rows of ``classes`` columns.

    Labels of shape ``(N,)`` or ``(N, 1)`` give ``(N, classes)``; whole-number
    floats (as a CSV column gives) count as integers. A label outside
    ``0..classes-1`` raises :class:`DataError` naming it and its record,
    rather than silently wrapping or producing an all-zero row. ``name`` only
    labels the messages (the caller passes the section name).
    """
    labels = np.asarray(labels)
    if classes < 1:
        raise DataError(f"{name}: one-hot needs at least 1 class, got {classes}")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if np.issubdtype(labels.dtype, np.floating):
        fractional = labels != np.round(labels)
        if fractional.any():
            record = int(np.flatnonzero(fractional)[0])
            raise DataError(f"{name}: record {record} has label {labels[record]}, not a whole number")
    elif not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{name}: one-hot needs integer labels, got dtype {labels.dtype}")
    labels = labels.astype(np.int64)
    outside = (labels < 0) | (labels >= classes)
    if outside.any():
        record = np.argwhere(outside)[0]
        where = int(record[0]) if len(record) == 1 else tuple(int(i) for i in record)
        raise DataError(f"{name}: label {labels[tuple(record)]} of record {where} is outside "
                        f"0..{classes - 1} ({classes} classes)")
    return np.eye(classes, dtype=np.float32)[labels]


def normalise(values, low: float = 0.0, high: float = 1.0, *, input_range: Sequence[float] | None = None,
              per_feature: bool = False) -> np.ndarray:
    """Rescale linearly into ``[low, high]``.

    ``input_range=(a, b)`` is a fixed mapping a -> low, b -> high (e.g.
    ``(0, 255)`` for pixels; values outside it land outside ``[low, high]``).
    Without it the range is adaptive: the array's overall min and max, or
    with ``per_feature`` each feature's min and max over the records (axis 0).
    A constant input maps to ``low``.
    """
    if not low < high:
        raise DataError(f"normalise: low ({low}) must be below high ({high})")
    values = _float(values)
    if input_range is not None:
        lo, hi = input_range
        if not lo < hi:
            raise DataError(f"normalise: input range {list(input_range)} must be [min, max] with min < max")
    elif per_feature:
        lo, hi = values.min(axis=0), values.max(axis=0)
    else:
        lo, hi = values.min(), values.max()
    span = np.asarray(hi - lo, dtype=values.dtype)
    scale = np.where(span > 0, (high - low) / np.where(span > 0, span, 1), 0)
    return ((values - lo) * scale + low).astype(values.dtype, copy=False)


def standardise(values) -> np.ndarray:
    """Shift and scale each feature (over axis 0) to mean 0 and standard deviation 1.

    A feature that never varies is only centred, so it does not become NaN.
    """
    values = _float(values)
    std = values.std(axis=0)
    return (values - values.mean(axis=0)) / np.where(std > 0, std, 1)


def permute_axes(values, axes: Sequence[int]) -> np.ndarray:
    """Reorder the axes of every record: ``axes`` permutes the axes after the record axis.

    ``permute_axes(x, (2, 0, 1))`` turns (N, H, W, C) into (N, C, H, W).
    """
    values = np.asarray(values)
    if sorted(axes) != list(range(values.ndim - 1)):
        raise DataError(f"permute: {list(axes)} is not a permutation of the record axes "
                        f"0..{values.ndim - 2} of shape {values.shape[1:]}")
    return np.transpose(values, (0, *(axis + 1 for axis in axes)))

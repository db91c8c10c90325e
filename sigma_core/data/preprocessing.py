"""Array transforms applied to whole sections: one-hot, normalise, standardise, permute; and a run file's
``preprocess`` transforms made of them (:class:`Preprocessing`).

Plain functions from array to array, shared by datasets, the run-file loader
and extractor plugins. The adaptive ones take their statistics from
:class:`Range` and :class:`Moments`, which also accumulate over chunks, so a
block dataset that never holds all records at once gets the same result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sigma_core.config import require
from sigma_core.data.errors import DataError
from sigma_core.errors import ConfigError

if TYPE_CHECKING:  # a Dataset one-hot encodes with this module's one_hot
    from sigma_core.data.dataset import Dataset


def _float(values) -> np.ndarray:
    values = np.asarray(values)
    return values.astype(np.result_type(values.dtype, np.float32), copy=False)


def one_hot(labels, classes: int, *, name: str = "labels") -> np.ndarray:
    """Encode integer ``labels`` of shape ``(N,)`` or ``(N, 1)`` as float32 rows of ``classes`` columns.

    Whole-number floats (from CSV) count as integers; a label outside the classes is an error, not a zero row.
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


class Range:
    """Running minimum and maximum over chunks of records: overall, or ``per_feature`` (over axis 0)."""

    def __init__(self, per_feature: bool = False):
        self.per_feature = per_feature
        self.low = self.high = None

    def update(self, values) -> Range:
        values = _float(values)
        if len(values) == 0:
            return self
        axis = 0 if self.per_feature else None
        low, high = values.min(axis=axis), values.max(axis=axis)
        self.low = low if self.low is None else np.minimum(self.low, low)
        self.high = high if self.high is None else np.maximum(self.high, high)
        return self

    @property
    def bounds(self) -> tuple:
        if self.low is None:
            raise DataError("normalise: no records to take the range of")
        return self.low, self.high


class Moments:
    """Per-feature mean and standard deviation over chunks of records (over axis 0).

    Chan et al.'s pairwise update in float64: independent of the chunking, and
    large means do not cancel the variance as summing squares would.
    """

    def __init__(self):
        self.count = 0
        self.mean = self._m2 = None

    def update(self, values) -> Moments:
        values = np.asarray(values, dtype=np.float64)
        n = len(values)
        if n == 0:
            return self
        mean = values.mean(axis=0)
        m2 = np.square(values - mean).sum(axis=0)
        if self.count == 0:
            self.count, self.mean, self._m2 = n, mean, m2
            return self
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self._m2 = self._m2 + m2 + np.square(delta) * (self.count * n / total)
        self.count = total
        return self

    @property
    def std(self) -> np.ndarray:
        """The population standard deviation (as NumPy's ``std``)."""
        if self.count == 0:
            raise DataError("standardise: no records to take the mean and deviation of")
        return np.sqrt(self._m2 / self.count)


def normalise(values, low: float = 0.0, high: float = 1.0, *, input_range: Sequence[float] | None = None,
              per_feature: bool = False) -> np.ndarray:
    """Rescale linearly into ``[low, high]``.

    From ``input_range`` (``(0, 255)`` for pixels), else from the min and max (each feature's with ``per_feature``).
    """
    if input_range is None:
        return rescale(values, Range(per_feature).update(values).bounds, low, high)
    lo, hi = input_range
    if not lo < hi:
        raise DataError(f"normalise: input range {list(input_range)} must be [min, max] with min < max")
    return rescale(values, (lo, hi), low, high)


def rescale(values, input_range: tuple, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """Map ``input_range`` (scalars, or per-feature arrays) onto ``[low, high]``; a constant feature maps to ``low``."""
    if not low < high:
        raise DataError(f"normalise: low ({low}) must be below high ({high})")
    values = _float(values)
    lo, hi = input_range
    span = np.asarray(hi - lo, dtype=values.dtype)
    scale = np.where(span > 0, (high - low) / np.where(span > 0, span, 1), 0)
    return ((values - lo) * scale + low).astype(values.dtype, copy=False)


def standardise(values, moments: Moments | None = None) -> np.ndarray:
    """Shift and scale each feature to mean 0 and deviation 1 (by ``moments`` fitted beforehand, if given).

    A feature that never varies is only centred, so it does not become NaN.
    """
    values = _float(values)
    moments = Moments().update(values) if moments is None else moments
    std = moments.std
    mean, std = moments.mean.astype(values.dtype), np.where(std > 0, std, 1).astype(values.dtype)
    return (values - mean) / std


def permute_axes(values, axes: Sequence[int]) -> np.ndarray:
    """Reorder the axes after the record axis: ``(2, 0, 1)`` turns (N, H, W, C) into (N, C, H, W)."""
    values = np.asarray(values)
    if sorted(axes) != list(range(values.ndim - 1)):
        raise DataError(f"permute: {list(axes)} is not a permutation of the record axes "
                        f"0..{values.ndim - 2} of shape {values.shape[1:]}")
    return np.transpose(values, (0, *(axis + 1 for axis in axes)))


# --- a run file's preprocess transforms -------------------------------------------


@dataclass
class _Transform:
    """One ``preprocess`` transform; its ``statistics`` (if any) must see every record's inputs before ``apply``."""

    name: str
    apply: Callable[[Dataset], Dataset]
    statistics: Range | Moments | None = None


def _inputs(transform: Callable[[np.ndarray], np.ndarray]) -> Callable[[Dataset], Dataset]:
    return lambda dataset: dataset.with_section("inputs", transform(dataset.section("inputs")))


def _normalise(value) -> _Transform:
    if isinstance(value, (list, tuple)):
        value = {"range": value}
    if not isinstance(value, Mapping):
        raise ConfigError("data.preprocess.normalise must be [min, max] or a table with range, "
                          f"input_range and per_feature, got {value!r}")
    require("data.preprocess.normalise", {"range": "interval", "input_range": "interval", "per_feature": "bool"},
            dict(value))
    bounds = value.get("range", [0, 1])
    if "input_range" in value:
        return _Transform("normalise", _inputs(lambda x: normalise(x, *bounds, input_range=value["input_range"])))
    fitted = Range(value.get("per_feature", False))
    return _Transform("normalise", _inputs(lambda x: rescale(x, fitted.bounds, *bounds)), fitted)


def _standardise(enabled) -> _Transform:
    require("data.preprocess.standardise", "bool", enabled)
    if not enabled:
        return _Transform("standardise", lambda dataset: dataset)
    fitted = Moments()
    return _Transform("standardise", _inputs(lambda x: standardise(x, fitted)), fitted)


def _shuffle(seed) -> _Transform:
    require("data.preprocess.shuffle", "int >= 0", seed)
    return _Transform("shuffle", lambda dataset: dataset.shuffle(seed))


def _permute(axes) -> _Transform:
    require("data.preprocess.permute", ["int"], axes)
    return _Transform("permute", _inputs(lambda x: permute_axes(x, axes)))


PREPROCESSORS: dict[str, Callable[[object], _Transform]] = {
    "normalise": _normalise, "standardise": _standardise, "shuffle": _shuffle, "permute": _permute,
}


def _transforms(tables) -> list[_Transform]:
    """Validated transforms from a list of one-key tables (or one table, taken in order)."""
    if isinstance(tables, Mapping):
        tables = [{key: value} for key, value in tables.items()]
    require("data.preprocess", ["table"], tables)
    for table in tables:
        require("data.preprocess", dict.fromkeys(PREPROCESSORS, "any"), table)
    return [PREPROCESSORS[key](value) for table in tables for key, value in table.items()]


class Preprocessing:
    """A data table's ``preprocess`` transforms and ``one_hot``, validated once.

    Called on a whole dataset with ``fit=True``, each adaptive transform (normalise
    without an ``input_range``, standardise) first takes its statistics from
    what reaches it. Records too many for memory are fitted with :meth:`fit`,
    one streaming pass per adaptive transform, and then transformed chunk by chunk:
    the result is what the in-memory dataset would give.
    """

    def __init__(self, transforms=None, one_hot: int | None = None):
        self._transforms = _transforms([] if transforms is None else transforms)
        if one_hot is not None:
            require("data.one_hot", "int >= 1", one_hot)
        self.one_hot = one_hot

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(transform.name for transform in self._transforms)

    @property
    def adaptive(self) -> tuple[str, ...]:
        """The transforms that take statistics from every record, which they must see first (empty: none)."""
        return tuple(transform.name for transform in self._transforms if transform.statistics is not None)

    def fit(self, passes: Callable[[], Iterable[Dataset]]) -> None:
        """Fit each adaptive transform over the chunks of ``passes()`` (called once per such transform), the
        transforms before it applied to them."""
        for position, transform in enumerate(self._transforms):
            if transform.statistics is not None:
                for chunk in passes():
                    transform.statistics.update(_apply(chunk, self._transforms[:position]).section("inputs"))

    def __call__(self, dataset: Dataset, *, fit: bool = False) -> Dataset:
        """``dataset`` through every transform, then its ``targets`` one-hot; with ``fit``, each adaptive transform
        first takes its statistics from what reaches it."""
        dataset = _apply(dataset, self._transforms, fit)
        return dataset if self.one_hot is None else dataset.one_hot("targets", self.one_hot)


def _apply(dataset: Dataset, transforms: list[_Transform], fit: bool = False) -> Dataset:
    """Run ``transforms``; with ``fit``, each one's statistics first see what reaches it."""
    for transform in transforms:
        if fit and transform.statistics is not None:
            transform.statistics.update(dataset.section("inputs"))
        dataset = transform.apply(dataset)
    return dataset

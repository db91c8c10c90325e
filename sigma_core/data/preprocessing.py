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
    return _standardised(values, moments.mean, moments.std)


def _standardised(values: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return (values - mean.astype(values.dtype)) / np.where(std > 0, std, 1).astype(values.dtype)


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
    """One ``preprocess`` transform: a change to a batch of input records (``inputs``) or to whole records
    (``records``: shuffle). Its ``statistics`` (if any) must see every record's inputs before it applies;
    ``value`` is its table value as fitted, for :meth:`Preprocessing.fitted`."""

    name: str
    value: Callable[[], object]
    inputs: Callable[[np.ndarray], np.ndarray] | None = None
    records: Callable[[Dataset], Dataset] | None = None
    statistics: Range | Moments | None = None


def _numbers(key: str, value) -> np.ndarray:
    """A finite number, or per-feature finite numbers (nested arrays), as float64."""
    try:
        array = np.asarray(value)
    except ValueError:  # ragged
        array = np.asarray(None)
    if array.dtype.kind not in "iuf" or not np.isfinite(array).all():
        raise ConfigError(f"{key}: expected a finite number or an array of them (one per feature), got "
                          f"{str(value)[:60]}")
    return array.astype(np.float64)


def _fits(key: str, statistic: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``statistic``, if it is one number or one per feature of ``values``' records."""
    if statistic.ndim and statistic.shape != values.shape[1:]:
        raise DataError(f"{key}: values of shape {statistic.shape}, one per feature, do not fit records of shape "
                        f"{values.shape[1:]}")
    return statistic


def _listed(statistic) -> object:
    """A fitted statistic as JSON numbers: float64 values survive the round trip exactly."""
    return np.asarray(statistic, dtype=np.float64).tolist()


def _normalise(value) -> _Transform:
    key = "data.preprocess.normalise"
    if isinstance(value, (list, tuple)):
        value = {"range": value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be [min, max] or a table with range, input_range and per_feature, "
                          f"got {value!r}")
    require(key, {"range": "interval", "input_range": "any", "per_feature": "bool"}, dict(value))
    bounds = value.get("range", [0, 1])
    if "input_range" in value:
        given = value["input_range"]
        if not (isinstance(given, (list, tuple)) and len(given) == 2):
            raise ConfigError(f"{key}.input_range: expected [min, max], two finite numbers or two arrays of them "
                              f"(one per feature), got {given!r}")
        low, high = (_numbers(f"{key}.input_range", bound) for bound in given)
        if low.shape != high.shape or (low > high).any():
            raise ConfigError(f"{key}.input_range: min and max must have one shape and min <= max")

        def given_range(x):
            x = _float(x)
            return rescale(x, (_fits(f"{key}.input_range", low, x).astype(x.dtype), high.astype(x.dtype)), *bounds)
        return _Transform("normalise", lambda: {"range": list(bounds), "input_range": [low.tolist(), high.tolist()]},
                          given_range)
    fitted = Range(value.get("per_feature", False))
    return _Transform("normalise", lambda: {"range": list(bounds), "input_range": list(map(_listed, fitted.bounds))},
                      lambda x: rescale(x, fitted.bounds, *bounds), statistics=fitted)


def _standardise(enabled) -> _Transform:
    key = "data.preprocess.standardise"
    if isinstance(enabled, Mapping):  # statistics given (or fitted before: Preprocessing.fitted)
        require(key, {"mean": "any", "std": "any"}, dict(enabled))
        if len(enabled) != 2:
            raise ConfigError(f"{key}: give both mean and std, or true to fit them to the training data")
        mean, std = _numbers(f"{key}.mean", enabled["mean"]), _numbers(f"{key}.std", enabled["std"])
        if mean.shape != std.shape or (std < 0).any():
            raise ConfigError(f"{key}: mean and std must have one shape and std >= 0")

        def given(x):
            x = _float(x)
            return _standardised(x, _fits(f"{key}.mean", mean, x), std)
        return _Transform("standardise", lambda: {"mean": mean.tolist(), "std": std.tolist()}, given)
    require(key, "bool", enabled)
    if not enabled:
        return _Transform("standardise", lambda: False, lambda x: x)
    fitted = Moments()
    return _Transform("standardise", lambda: {"mean": _listed(fitted.mean), "std": _listed(fitted.std)},
                      lambda x: standardise(x, fitted), statistics=fitted)


def _shuffle(seed) -> _Transform:
    require("data.preprocess.shuffle", "int >= 0", seed)
    return _Transform("shuffle", lambda: seed, records=lambda dataset: dataset.shuffle(seed))


def _permute(axes) -> _Transform:
    require("data.preprocess.permute", ["int"], axes)
    return _Transform("permute", lambda: list(axes), lambda x: permute_axes(x, axes))


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

    Once fitted, :meth:`fitted` writes the transforms back as a ``preprocess``
    list whose statistics are spelt out (``{"standardise": {"mean": [...], "std":
    [...]}}``): what checkpoints and exports keep, so that a trained network takes
    raw inputs (:meth:`inputs`), transformed as its training data was.
    """

    def __init__(self, transforms=None, one_hot: int | None = None):
        self._transforms = _transforms([] if transforms is None else transforms)
        if one_hot is not None:
            require("data.one_hot", "int >= 1", one_hot)
        self.one_hot = one_hot
        self._raw = Range()  # the raw inputs seen by fit() and __call__

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(transform.name for transform in self._transforms)

    @property
    def adaptive(self) -> tuple[str, ...]:
        """The transforms that take statistics from every record, which they must see first (empty: none)."""
        return tuple(transform.name for transform in self._transforms if transform.statistics is not None)

    @property
    def raw_range(self) -> tuple[float, float] | None:
        """The smallest and largest raw input value of the datasets it fitted or transformed (None: none), such as
        0 and 255 for pixels: what a drawing's blank and ink become before :meth:`inputs` (``sigmann-web``)."""
        return None if self._raw.low is None else (float(self._raw.low), float(self._raw.high))

    def fit(self, passes: Callable[[], Iterable[Dataset]]) -> None:
        """Fit each adaptive transform over the chunks of ``passes()`` (called once per such transform), the
        transforms before it applied to them."""
        for position, transform in enumerate(self._transforms):
            if transform.statistics is not None:
                for chunk in passes():
                    self._raw.update(chunk.section("inputs"))
                    transform.statistics.update(_apply(chunk, self._transforms[:position]).section("inputs"))

    def fitted(self) -> list[dict]:
        """The transforms as a ``preprocess`` list (JSON-ready) with every fitted statistic written out, so that
        ``Preprocessing(fitted())`` transforms inputs as this one does without fitting anything."""
        return [{transform.name: transform.value()} for transform in self._transforms]

    def inputs(self, values) -> np.ndarray:
        """A batch of raw input records (records on axis 0) through the transforms that change inputs: every one
        but ``shuffle``, which reorders records; the adaptive ones must have been fitted."""
        for transform in self._transforms:
            if transform.inputs is not None:
                values = transform.inputs(values)
        return values

    def __call__(self, dataset: Dataset, *, fit: bool = False) -> Dataset:
        """``dataset`` through every transform, then its ``targets`` one-hot; with ``fit``, each adaptive transform
        first takes its statistics from what reaches it."""
        self._raw.update(dataset.section("inputs"))
        dataset = _apply(dataset, self._transforms, fit)
        return dataset if self.one_hot is None else dataset.one_hot("targets", self.one_hot)


def _apply(dataset: Dataset, transforms: list[_Transform], fit: bool = False) -> Dataset:
    """Run ``transforms``; with ``fit``, each one's statistics first see what reaches it."""
    for transform in transforms:
        if fit and transform.statistics is not None:
            transform.statistics.update(dataset.section("inputs"))
        dataset = (transform.records(dataset) if transform.inputs is None
                   else dataset.with_section("inputs", transform.inputs(dataset.section("inputs"))))
    return dataset

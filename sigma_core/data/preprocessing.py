"""A run file's ``preprocess`` transforms (:class:`Preprocessing`).

The adaptive transforms take their statistics from :class:`Range` and :class:`Moments`, which also accumulate
over chunks, so a block dataset that never holds all records at once gets the same result.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from sigma_core.config import require
from sigma_core.data.dataset import DataError, Dataset
from sigma_core.errors import ConfigError


def _float(values) -> np.ndarray:
    values = np.asarray(values)
    return values.astype(np.result_type(values.dtype, np.float32), copy=False)


class Range:
    """Running minimum and maximum over chunks of records: overall, or ``per_feature`` (over axis 0)."""

    def __init__(self, per_feature: bool = False):
        self.per_feature = per_feature
        self.low = self.high = None

    def update(self, values) -> "Range":
        values = _float(values)
        if len(values):
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

    def update(self, values) -> "Moments":
        values = np.asarray(values, dtype=np.float64)
        n = len(values)
        if n:
            mean = values.mean(axis=0)
            m2 = np.square(values - mean).sum(axis=0)
            if self.count:
                total, delta = self.count + n, mean - self.mean
                mean = self.mean + delta * (n / total)
                m2 = self._m2 + m2 + np.square(delta) * (self.count * n / total)
            self.count, self.mean, self._m2 = self.count + n, mean, m2
        return self

    @property
    def std(self) -> np.ndarray:
        """The population standard deviation (as NumPy's ``std``)."""
        if self.count == 0:
            raise DataError("standardise: no records to take the mean and deviation of")
        return np.sqrt(self._m2 / self.count)


def _standardised(values: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return (values - mean.astype(values.dtype)) / np.where(std > 0, std, 1).astype(values.dtype)


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


def _fitting(key: str, x, *statistics) -> np.ndarray:
    """``x`` as floats, if each statistic is one number or one per feature of its records."""
    x = _float(x)
    for statistic in statistics:
        if np.ndim(statistic) and np.shape(statistic) != x.shape[1:]:
            raise DataError(f"{key}: values of shape {np.shape(statistic)}, one per feature, do not fit records of "
                            f"shape {x.shape[1:]}")
    return x


def _listed(statistics) -> list:
    """Statistics as JSON numbers: float64 values survive the round trip exactly."""
    return np.asarray(statistics, dtype=np.float64).tolist()


def _normalise(value) -> _Transform:
    key = "data.preprocess.normalise"
    if isinstance(value, (list, tuple)):
        value = {"range": value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be [min, max] or a table with range, input_range and per_feature, "
                          f"got {value!r}")
    require(key, {"range": "interval", "input_range": "any", "per_feature": "bool"}, dict(value))
    low, high = value.get("range", [0, 1])
    if not low < high:
        raise ConfigError(f"{key}.range: {low} must be below {high}")
    fitted = Range(value.get("per_feature", False))
    if "input_range" in value:  # given, or fitted before (Preprocessing.fitted)
        given = value["input_range"]
        if not (isinstance(given, (list, tuple)) and len(given) == 2):
            raise ConfigError(f"{key}.input_range: expected [min, max], two finite numbers or two arrays of them "
                              f"(one per feature), got {given!r}")
        fitted.low, fitted.high = (_numbers(f"{key}.input_range", bound) for bound in given)
        if fitted.low.shape != fitted.high.shape or (fitted.low > fitted.high).any():
            raise ConfigError(f"{key}.input_range: min and max must have one shape and min <= max")

    def inputs(x):
        """``input_range`` mapped linearly onto ``range``; a constant feature maps to its low end."""
        x = _fitting(f"{key}.input_range", x, *fitted.bounds)
        lo, hi = (np.asarray(bound).astype(x.dtype) for bound in fitted.bounds)
        span = hi - lo
        scale = np.where(span > 0, (high - low) / np.where(span > 0, span, 1), 0)
        return ((x - lo) * scale + low).astype(x.dtype, copy=False)
    return _Transform("normalise", lambda: {"range": [low, high], "input_range": _listed(fitted.bounds)}, inputs,
                      statistics=None if "input_range" in value else fitted)


def _standardise(value) -> _Transform:
    key = "data.preprocess.standardise"
    if isinstance(value, Mapping):  # given, or fitted before (Preprocessing.fitted)
        require(key, {"mean": "any", "std": "any"}, dict(value))
        if len(value) != 2:
            raise ConfigError(f"{key}: give both mean and std, or true to fit them to the training data")
        mean, std = _numbers(f"{key}.mean", value["mean"]), _numbers(f"{key}.std", value["std"])
        if mean.shape != std.shape or (std < 0).any():
            raise ConfigError(f"{key}: mean and std must have one shape and std >= 0")
        return _Transform("standardise", lambda: {"mean": mean.tolist(), "std": std.tolist()},
                          lambda x: _standardised(_fitting(f"{key}.mean", x, mean), mean, std))
    require(key, "bool", value)
    if not value:
        return _Transform("standardise", lambda: False, lambda x: x)
    fitted = Moments()
    return _Transform("standardise", lambda: {"mean": _listed(fitted.mean), "std": _listed(fitted.std)},
                      lambda x: _standardised(_float(x), fitted.mean, fitted.std), statistics=fitted)


def _shuffle(seed) -> _Transform:
    require("data.preprocess.shuffle", "int >= 0", seed)
    return _Transform("shuffle", lambda: seed, records=lambda dataset: dataset.shuffle(seed))


def _permute(axes) -> _Transform:
    """The axes after the record axis reordered: ``[2, 0, 1]`` turns (N, H, W, C) into (N, C, H, W)."""
    require("data.preprocess.permute", ["int"], axes)

    def inputs(x):
        x = np.asarray(x)
        if sorted(axes) != list(range(x.ndim - 1)):
            raise DataError(f"data.preprocess.permute: {list(axes)} is not a permutation of the record axes "
                            f"0..{x.ndim - 2} of shape {x.shape[1:]}")
        return np.transpose(x, (0, *(axis + 1 for axis in axes)))
    return _Transform("permute", lambda: list(axes), inputs)


PREPROCESSORS: dict[str, Callable[[object], _Transform]] = {
    "normalise": _normalise, "standardise": _standardise, "shuffle": _shuffle, "permute": _permute,
}


class Preprocessing:
    """A data table's ``preprocess`` transforms (a list of one-key tables, or one table taken in order) and
    ``one_hot``, validated once.

    The adaptive transforms (normalise without an ``input_range``, standardise) take their statistics from what
    reaches them: from a whole dataset (``fit=True``) or, for records too many for memory, in streaming passes
    (:meth:`fit`) with the same result. :meth:`fitted` spells the statistics out: what checkpoints and exports
    keep, so that a trained network takes raw inputs (:meth:`inputs`).
    """

    def __init__(self, transforms=None, one_hot: int | None = None):
        tables = [] if transforms is None else transforms
        if isinstance(tables, Mapping):
            tables = [{key: value} for key, value in tables.items()]
        require("data.preprocess", ["table"], tables)
        for table in tables:
            require("data.preprocess", dict.fromkeys(PREPROCESSORS, "any"), table)
        self._transforms = [PREPROCESSORS[key](value) for table in tables for key, value in table.items()]
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
                    transform.statistics.update(self._apply(chunk, position).section("inputs"))

    def fitted(self) -> list[dict]:
        """The transforms as a JSON-ready ``preprocess`` list with every fitted statistic written out, so that
        ``Preprocessing(fitted())`` transforms inputs as this one does without fitting anything."""
        return [{transform.name: transform.value()} for transform in self._transforms]

    def inputs(self, values) -> np.ndarray:
        """A batch of raw input records through every transform but ``shuffle`` (which reorders records); the
        adaptive ones must have been fitted."""
        for transform in self._transforms:
            if transform.inputs is not None:
                values = transform.inputs(values)
        return values

    def __call__(self, dataset: Dataset, *, fit: bool = False) -> Dataset:
        """``dataset`` through every transform (fitted to it first with ``fit``), then its ``targets`` one-hot."""
        self._raw.update(dataset.section("inputs"))
        dataset = self._apply(dataset, len(self._transforms), fit)
        return dataset if self.one_hot is None else dataset.one_hot("targets", self.one_hot)

    def _apply(self, dataset: Dataset, stop: int, fit: bool = False) -> Dataset:
        """``dataset`` through the first ``stop`` transforms; with ``fit``, each one's statistics first see what
        reaches it."""
        for transform in self._transforms[:stop]:
            if fit and transform.statistics is not None:
                transform.statistics.update(dataset.section("inputs"))
            dataset = (transform.records(dataset) if transform.inputs is None
                       else dataset.with_section("inputs", transform.inputs(dataset.section("inputs"))))
        return dataset

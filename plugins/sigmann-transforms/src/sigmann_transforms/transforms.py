"""The ``preprocess`` transforms: ``normalise``, ``standardise``, ``shuffle`` and ``permute``.

Each is ``transform(value) -> sigma_core.Transform`` from its run-file table value. The adaptive ones take
statistics from every training record (:class:`~sigma_core.Range`, :class:`Moments`), which also accumulate over
chunks, so a block dataset that never holds all records at once gets the same result; their ``value()`` spells
the statistics out, so checkpoints and exports keep them and a loaded network takes raw inputs.
"""

from collections.abc import Mapping

import numpy as np

from sigma_core import ConfigError, DataError, Range, Transform, as_float, require


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
    x = as_float(x)
    for statistic in statistics:
        if np.ndim(statistic) and np.shape(statistic) != x.shape[1:]:
            raise DataError(f"{key}: values of shape {np.shape(statistic)}, one per feature, do not fit records of "
                            f"shape {x.shape[1:]}")
    return x


def _listed(statistics) -> list:
    """Statistics as JSON numbers: float64 values survive the round trip exactly."""
    return np.asarray(statistics, dtype=np.float64).tolist()


def normalise(value) -> Transform:
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
    return Transform("normalise", lambda: {"range": [low, high], "input_range": _listed(fitted.bounds)}, inputs,
                      statistics=None if "input_range" in value else fitted)


def standardise(value) -> Transform:
    key = "data.preprocess.standardise"
    if isinstance(value, Mapping):  # given, or fitted before (Preprocessing.fitted)
        require(key, {"mean": "any", "std": "any"}, dict(value))
        if len(value) != 2:
            raise ConfigError(f"{key}: give both mean and std, or true to fit them to the training data")
        mean, std = _numbers(f"{key}.mean", value["mean"]), _numbers(f"{key}.std", value["std"])
        if mean.shape != std.shape or (std < 0).any():
            raise ConfigError(f"{key}: mean and std must have one shape and std >= 0")
        return Transform("standardise", lambda: {"mean": mean.tolist(), "std": std.tolist()},
                          lambda x: _standardised(_fitting(f"{key}.mean", x, mean), mean, std))
    require(key, "bool", value)
    if not value:
        return Transform("standardise", lambda: False, lambda x: x)
    fitted = Moments()
    return Transform("standardise", lambda: {"mean": _listed(fitted.mean), "std": _listed(fitted.std)},
                      lambda x: _standardised(as_float(x), fitted.mean, fitted.std), statistics=fitted)


def shuffle(seed) -> Transform:
    require("data.preprocess.shuffle", "int >= 0", seed)
    return Transform("shuffle", lambda: seed, records=lambda dataset: dataset.shuffle(seed))


def permute(axes) -> Transform:
    """The axes after the record axis reordered: ``[2, 0, 1]`` turns (N, H, W, C) into (N, C, H, W)."""
    require("data.preprocess.permute", ["int"], axes)

    def inputs(x):
        x = np.asarray(x)
        if sorted(axes) != list(range(x.ndim - 1)):
            raise DataError(f"data.preprocess.permute: {list(axes)} is not a permutation of the record axes "
                            f"0..{x.ndim - 2} of shape {x.shape[1:]}")
        return np.transpose(x, (0, *(axis + 1 for axis in axes)))
    return Transform("permute", lambda: list(axes), inputs)

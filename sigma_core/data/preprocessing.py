"""A run file's ``preprocess`` transforms (:class:`Preprocessing`), each one a registered ``transform``.

The transforms themselves are plugins' (``register_transforms``; ``normalise``, ``standardise``, ``shuffle`` and
``permute`` come from ``sigmann-transforms``): the core keeps the container that applies them in order, fits the
adaptive ones and spells out what they fitted, which checkpoints and exports store. Statistics accumulate over
chunks (:class:`Range`), so a block dataset that never holds all records at once gets the same result.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from sigma_core import plugins
from sigma_core.config import require
from sigma_core.data.dataset import DataError, Dataset
from sigma_core.errors import ConfigError, UnknownComponentError


def as_float(values) -> np.ndarray:
    """``values`` as an array of floats: float32 or wider, as they came."""
    values = np.asarray(values)
    return values.astype(np.result_type(values.dtype, np.float32), copy=False)


class Range:
    """Running minimum and maximum over chunks of records: overall, or ``per_feature`` (over axis 0)."""

    def __init__(self, per_feature: bool = False):
        self.per_feature = per_feature
        self.low = self.high = None

    def update(self, values) -> "Range":
        values = as_float(values)
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


@dataclass
class Transform:
    """One ``preprocess`` transform, as a registered ``transform(value)`` returns it: a change to a batch of input
    records (``inputs``) or to whole records (``records``: shuffle). Its ``statistics`` (if any: an object with
    ``update(values)``) must see every training record's inputs before it applies; ``value()`` is its table value
    as fitted, for :meth:`Preprocessing.fitted`."""

    name: str
    value: Callable[[], object]
    inputs: Callable[[np.ndarray], np.ndarray] | None = None
    records: Callable[[Dataset], Dataset] | None = None
    statistics: object | None = None


def _transform(key: str, value) -> Transform:
    """The registered transform ``key`` made from its table value; an unknown one names ``data.preprocess``."""
    try:
        return plugins.load("transform", key)(value)
    except UnknownComponentError as error:
        raise ConfigError(f"data.preprocess: {error}") from None


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
        self._transforms = [_transform(key, value) for table in tables for key, value in table.items()]
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

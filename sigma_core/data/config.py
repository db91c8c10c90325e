"""Build a dataset from the ``data`` block of a run file, through the extractor registry.

``source`` names a registered extractor (Sigma's or a plugin's); the block's
other keys are its keyword arguments, checked against its signature, plus keys
every source shares::

    {"source": "csv", "path": ["https://a/x.csv.gz", "mirror/x.csv.gz"], "md5": "...",
     "sections": {"inputs": "0-3", "targets": 4}, "preprocess": [{"normalise": [0, 1]}], "one_hot": 3}
    {"source": "csv", "path": "big.csv", "blocks": {"records": 10000, "memory_budget": 100000000}}

Arguments named ``path`` or ``*_path`` are local paths, or resolved to one by a
registered source (:func:`~sigma_core.data.sources.resolve_path`: URLs, archives
and checksums). An extractor returns a :class:`Dataset`, a dict of arrays, or an
iterable of such chunks. ``preprocess`` and ``one_hot`` make a :class:`Preprocessing`.
``blocks`` hands the extractor's chunks and the preprocessing to the cache
registered as ``blocks`` (``sigmann-data``'s on-disk block cache, see
:func:`~sigma_core.hookspecs.register_caches`), which fits the adaptive steps in
streaming passes and returns records read block by block within a memory budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from sigma_core import plugins
from sigma_core.arguments import accepts, check, require
from sigma_core.data.dataset import Dataset, Records
from sigma_core.data.errors import DataError
from sigma_core.data.preprocessing import Moments, Range, normalise, permute_axes, rescale, standardise
from sigma_core.data.sources import resolve_path
from sigma_core.errors import ConfigError, UnknownComponentError

COMMON_KEYS = ("source", "preprocess", "one_hot", "md5", "sha256", "blocks")


@dataclass
class _Step:
    """One ``preprocess`` step; its ``statistics`` (if any) must see every record's inputs before ``apply``."""

    name: str
    apply: Callable[[Dataset], Dataset]
    statistics: Range | Moments | None = None


def _inputs(transform: Callable[[np.ndarray], np.ndarray]) -> Callable[[Dataset], Dataset]:
    return lambda dataset: dataset.with_section("inputs", transform(dataset.section("inputs")))


def _normalise_step(value) -> _Step:
    if isinstance(value, (list, tuple)):
        value = {"range": value}
    if not isinstance(value, Mapping) or set(value) - {"range", "input_range", "per_feature"}:
        raise ConfigError("data.preprocess.normalise must be [min, max] or a table with range, "
                          f"input_range and per_feature, got {value!r}")
    for key in ("range", "input_range"):
        if key in value and not (isinstance(value[key], (list, tuple)) and len(value[key]) == 2
                                 and all(accepts("number", bound) for bound in value[key])):
            raise ConfigError(f"data.preprocess.normalise.{key} must be [min, max], got {value[key]!r}")
    bounds = value.get("range", [0, 1])
    if "input_range" in value:
        return _Step("normalise", _inputs(lambda x: normalise(x, *bounds, input_range=value["input_range"])))
    fitted = Range(bool(value.get("per_feature", False)))
    return _Step("normalise", _inputs(lambda x: rescale(x, fitted.bounds, *bounds)), fitted)


def _standardise_step(enabled) -> _Step:
    require("data.preprocess.standardise", "bool", enabled)
    if not enabled:
        return _Step("standardise", lambda dataset: dataset)
    fitted = Moments()
    return _Step("standardise", _inputs(lambda x: standardise(x, fitted)), fitted)


def _shuffle_step(seed) -> _Step:
    require("data.preprocess.shuffle", "int >= 0", seed)
    return _Step("shuffle", lambda dataset: dataset.shuffle(seed))


def _permute_step(axes) -> _Step:
    if not (isinstance(axes, list) and all(isinstance(a, int) for a in axes)):
        raise ConfigError(f"data.preprocess.permute must be a list of record axes, got {axes!r}")
    return _Step("permute", _inputs(lambda x: permute_axes(x, axes)))


PREPROCESSORS: dict[str, Callable[[object], _Step]] = {
    "normalise": _normalise_step, "standardise": _standardise_step, "shuffle": _shuffle_step, "permute": _permute_step,
}


def _steps(steps) -> list[_Step]:
    """Validated steps from a list of one-key tables (or one table, taken in order)."""
    if isinstance(steps, Mapping):
        steps = [{key: value} for key, value in steps.items()]
    if not isinstance(steps, list) or not all(isinstance(step, Mapping) for step in steps):
        raise ConfigError(f"data.preprocess must be a list of {{step: value}} mappings, got {steps!r}")
    pairs = [(key, value) for step in steps for key, value in step.items()]
    for key, _ in pairs:
        if key not in PREPROCESSORS:
            raise ConfigError(f"unknown key data.preprocess.{key}; allowed: {', '.join(PREPROCESSORS)}")
    return [PREPROCESSORS[key](value) for key, value in pairs]


class Preprocessing:
    """A data table's ``preprocess`` steps and ``one_hot``, validated once.

    Called on a whole dataset with ``fit=True``, each adaptive step (normalise
    without an ``input_range``, standardise) first takes its statistics from
    what reaches it. Records too many for memory are fitted with :meth:`fit`,
    one streaming pass per adaptive step, and then transformed chunk by chunk:
    the result is what the in-memory dataset would give.
    """

    def __init__(self, steps=None, one_hot: int | None = None):
        self._steps = _steps([] if steps is None else steps)
        if one_hot is not None:
            require("data.one_hot", "int >= 1", one_hot)
        self.one_hot = one_hot

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(step.name for step in self._steps)

    @property
    def adaptive(self) -> tuple[str, ...]:
        """The steps that take statistics from every record, which they must see first (empty: none)."""
        return tuple(step.name for step in self._steps if step.statistics is not None)

    def fit(self, passes: Callable[[], Iterable[Dataset]]) -> None:
        """Fit each adaptive step over the chunks of ``passes()`` (called once per such step), the steps before it
        applied to them."""
        for position, step in enumerate(self._steps):
            if step.statistics is not None:
                for chunk in passes():
                    step.statistics.update(_apply(chunk, self._steps[:position]).section("inputs"))

    def __call__(self, dataset: Dataset, *, fit: bool = False) -> Dataset:
        """``dataset`` through every step, then its ``targets`` one-hot; with ``fit``, each adaptive step first
        takes its statistics from what reaches it."""
        dataset = _apply(dataset, self._steps, fit)
        return dataset if self.one_hot is None else dataset.one_hot("targets", self.one_hot)


def _apply(dataset: Dataset, steps: list[_Step], fit: bool = False) -> Dataset:
    """Run ``steps``; with ``fit``, each step's statistics first see what reaches it."""
    for step in steps:
        if fit and step.statistics is not None:
            step.statistics.update(dataset.section("inputs"))
        dataset = step.apply(dataset)
    return dataset


def _arguments(source: str, extractor: Callable, cfg: Mapping) -> dict:
    """The extractor's keyword arguments from ``cfg``, checked against its signature, paths resolved."""
    arguments = {key: value for key, value in cfg.items() if key not in COMMON_KEYS}
    check("data", extractor, arguments, label=f"source {source!r}", shared=COMMON_KEYS)
    for key, value in arguments.items():
        if key == "path" or key.endswith("_path"):
            checksums = {k: cfg.get(k) for k in ("md5", "sha256")} if key == "path" else {}
            arguments[key] = resolve_path(value, **checksums, key=f"data.{key}")
    return arguments


def _chunks(result, source: str) -> Iterator[Dataset]:
    """An extractor's result as datasets: itself, its one dict of arrays, or each chunk it yields."""
    if isinstance(result, Dataset):
        yield result
        return
    for chunk in [result] if isinstance(result, Mapping) else result:  # a dict: one chunk, the simplest extractor
        yield chunk if isinstance(chunk, Dataset) else Dataset(chunk, source)


def _in_memory(result, source: str) -> Dataset:
    chunks = list(_chunks(result, source))
    if not chunks:
        raise DataError(f"source {source!r} produced no records")
    if len(chunks) == 1:
        return chunks[0]
    return Dataset({s: np.concatenate([c.section(s) for c in chunks]) for s in chunks[0].section_names}, source)


def _blocks_cache() -> Callable:
    try:
        return plugins.load("cache", "blocks")
    except UnknownComponentError:
        raise ConfigError("data.blocks needs the block cache: install sigmann-data, which provides it") from None


def dataset_from_config(cfg: Mapping) -> Records:
    """The dataset a run file's ``data`` block describes (see the module docstring)."""
    if "source" not in cfg:
        raise ConfigError(f"data.source is missing; allowed: {', '.join(c.name for c in plugins.components('extractor'))}")
    source = cfg["source"]
    try:
        extractor = plugins.load("extractor", source)
    except UnknownComponentError as error:  # it lists the extractors
        raise ConfigError(f"data.source: {error}") from None
    preprocessing = Preprocessing(cfg.get("preprocess", []), cfg.get("one_hot"))
    cache = _blocks_cache() if "blocks" in cfg else None
    arguments = _arguments(source, extractor, cfg)
    try:
        if cache is None:
            return preprocessing(_in_memory(extractor(**arguments), source), fit=True)
        return cache(cfg["blocks"], source=source, config={k: v for k, v in cfg.items() if k != "blocks"},
                     arguments=arguments, read=lambda: _chunks(extractor(**arguments), source),
                     preprocessing=preprocessing)
    except MemoryError as error:  # NumPy's message says how much, in what shape
        raise DataError(f"data.source {source!r}: not enough memory: {error}") from None

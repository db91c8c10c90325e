"""Build a dataset from the ``data`` block of a run file, through the extractor registry.

``source`` names a registered extractor (Sigma's or a plugin's); the block's
other keys are its keyword arguments, checked against its signature, plus keys
every source shares::

    {"source": "csv", "path": ["https://a/x.csv.gz", "mirror/x.csv.gz"], "md5": "...",
     "sections": {"inputs": "0-3", "targets": 4}, "preprocess": [{"normalise": [0, 1]}], "one_hot": 3}
    {"source": "csv", "path": "big.csv", "blocks": {"records": 10000, "memory_budget": 100000000}}

Arguments named ``path`` or ``*_path`` are sources (:func:`~sigma_core.data.sources.resolve`).
An extractor returns a :class:`Dataset` or an iterable of section-dict chunks.
``blocks`` stores the records as an on-disk block cache keyed by the data
block (:mod:`sigma_core.data.blocks`) and preprocesses block by block: steps
with statistics of the whole dataset (adaptive normalise, standardise) are
fitted first, one streaming pass each, so the cache holds what the in-memory
dataset would; only ``shuffle``, which needs every record at once, is refused.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sigma_core import plugins
from sigma_core.arguments import accepts, check, require
from sigma_core.atomic import partial_prefix
from sigma_core.data.blocks import BlockDataset, build_blocks, is_built, read_blocks
from sigma_core.data.dataset import Dataset
from sigma_core.data.errors import DataError
from sigma_core.data.preprocessing import Moments, Range, normalise, permute_axes, rescale, standardise
from sigma_core.data.sources import data_dir, resolve
from sigma_core.errors import ConfigError, UnknownComponentError

COMMON_KEYS = ("source", "preprocess", "one_hot", "md5", "sha256", "blocks")
BLOCK_KEYS = ("records", "memory_budget", "directory")


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


def _apply(dataset: Dataset, steps: list[_Step], fit: bool = False) -> Dataset:
    """Run ``steps``; with ``fit``, each step's statistics first see what reaches it."""
    for step in steps:
        if fit and step.statistics is not None:
            step.statistics.update(dataset.section("inputs"))
        dataset = step.apply(dataset)
    return dataset


def _one_hot(dataset: Dataset, cfg: Mapping) -> Dataset:
    return dataset.one_hot("targets", cfg["one_hot"]) if "one_hot" in cfg else dataset


def _arguments(source: str, extractor: Callable, cfg: Mapping) -> dict:
    """The extractor's keyword arguments from ``cfg``, checked against its signature, sources resolved."""
    arguments = {key: value for key, value in cfg.items() if key not in COMMON_KEYS}
    check("data", extractor, arguments, label=f"source {source!r}", shared=COMMON_KEYS)
    for key, value in arguments.items():
        if key == "path" or key.endswith("_path"):
            checksums = {k: cfg.get(k) for k in ("md5", "sha256")} if key == "path" else {}
            arguments[key] = resolve(value, **checksums)
    return arguments


def _in_memory(result, source: str) -> Dataset:
    if isinstance(result, Dataset):
        return result
    if isinstance(result, Mapping):  # {"inputs": ..., "targets": ...}: one chunk, the simplest extractor
        result = [result]
    chunks = list(result)
    if not chunks:
        raise DataError(f"source {source!r} produced no records")
    return Dataset({s: np.concatenate([c[s] for c in chunks]) for s in chunks[0]}, source)


def _cache_directory(cfg: Mapping, arguments: Mapping, blocks: Mapping) -> Path:
    """A folder keyed by the data block and the state of its local files, so an edit rebuilds the cache."""
    if "directory" in blocks:
        return Path(blocks["directory"])
    key = {k: v for k, v in cfg.items() if k != "blocks"} | {"records": blocks["records"]}
    for name, value in arguments.items():
        if isinstance(value, Path) and value.exists():
            stat = value.stat()
            key[f"{name}:stat"] = [str(value), stat.st_size, stat.st_mtime_ns]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return data_dir() / "blocks" / f"{cfg['source']}-{digest}"


def _block_dataset(cfg, source, extractor, arguments, steps) -> BlockDataset:
    blocks = cfg["blocks"]
    if not isinstance(blocks, Mapping) or set(blocks) - set(BLOCK_KEYS):
        raise ConfigError(f"data.blocks must be a table with keys {', '.join(BLOCK_KEYS)}, got {blocks!r}")
    for key in ("records", "memory_budget"):
        require(f"data.blocks.{key}", "int >= 1", blocks.get(key))
    if any(step.name == "shuffle" for step in steps):
        raise ConfigError("data.preprocess.shuffle needs the whole dataset, which data.blocks does not hold in "
                          "memory; drop it (the minibatch iterator shuffles every epoch) or drop data.blocks")
    directory = _cache_directory(cfg, arguments, blocks)
    if not is_built(directory):
        result = extractor(**arguments)
        chunks = [result] if isinstance(result, Dataset) else (Dataset(c, source) for c in result)

        def build(chunks):
            build_blocks((_one_hot(_apply(chunk, steps), cfg)[:] for chunk in chunks), directory,
                         block_records=blocks["records"], name=source)

        if not any(step.statistics is not None for step in steps):
            build(chunks)
        else:  # fitted steps need every record first: stage the raw records beside the cache, fit over them
            directory.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=directory.parent, prefix=partial_prefix(directory)) as staging:
                raw = build_blocks((chunk[:] for chunk in chunks), Path(staging) / "raw",
                                   block_records=blocks["records"], name=source)
                for position, step in enumerate(steps):  # one pass per fitted step, the steps before it applied
                    if step.statistics is not None:
                        for block in read_blocks(raw):
                            step.statistics.update(_apply(Dataset(block, source), steps[:position]).section("inputs"))
                build(Dataset(block, source) for block in read_blocks(raw))
    return BlockDataset(directory, blocks["memory_budget"])


def dataset_from_config(cfg: Mapping) -> Dataset | BlockDataset:
    """The dataset a run file's ``data`` block describes (see the module docstring)."""
    if "source" not in cfg:
        raise ConfigError(f"data.source is missing; allowed: {', '.join(c.name for c in plugins.components('extractor'))}")
    source = cfg["source"]
    try:
        extractor = plugins.load("extractor", source)
    except UnknownComponentError as error:  # it lists the extractors, or names the distribution to install
        raise ConfigError(f"data.source: {error}") from None
    arguments = _arguments(source, extractor, cfg)
    steps = _steps(cfg.get("preprocess", []))
    require("data.one_hot", "int >= 1", cfg.get("one_hot", 1))
    try:
        if "blocks" in cfg:
            return _block_dataset(cfg, source, extractor, arguments, steps)
        return _one_hot(_apply(_in_memory(extractor(**arguments), source), steps, fit=True), cfg)
    except MemoryError as error:  # NumPy's message says how much, in what shape
        raise DataError(f"data.source {source!r}: not enough memory: {error}") from None

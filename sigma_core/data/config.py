"""Build a dataset from the ``data`` block of a run file.

A block names a ``source`` and that source's keys, plus optional keys every
source shares::

    {"source": "sklearn", "name": "digits", "preprocess": [{"standardise": true}], "one_hot": 10}
    {"source": "mnist", "directory": "data/mnist", "train": false}
    {"source": "npz", "path": "data.npz", "inputs": "x", "targets": "y"}
    {"source": "xor"}

Every key is checked: a typo is a :class:`ConfigError` naming the key and the
allowed ones, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from sigma_core.data.dataset import Dataset
from sigma_core.data.errors import DataError
from sigma_core.data.idx import load_mnist
from sigma_core.data.preprocessing import normalise, standardise
from sigma_core.data.sklearn_datasets import load_sklearn
from sigma_core.data.synthetic import and_, synthetic_classification, xor
from sigma_core.errors import ConfigError

COMMON_KEYS = ("source", "preprocess", "one_hot")


def _load_npz(path: str, inputs: str = "inputs", targets: str = "targets") -> Dataset:
    """Two arrays of a ``.npz`` archive; pickled objects are refused, so a data file cannot run code."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:  # missing file, or not an npz archive
        raise DataError(f"cannot read npz file {path}: {error}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):  # np.load also reads a bare .npy array
        raise DataError(f"{path} is a single .npy array, not an .npz archive of named arrays")
    with archive:
        for key, array in (("inputs", inputs), ("targets", targets)):
            if array not in archive.files:
                raise ConfigError(f"data.{key}: npz file {path} has no array {array!r}; it has {archive.files}")
        return Dataset({"inputs": archive[inputs], "targets": archive[targets]}, str(path))


# source -> (loader, its required keys, its optional keys); the keys are the loader's keyword arguments.
SOURCES: dict[str, tuple[Callable[..., Dataset], tuple[str, ...], tuple[str, ...]]] = {
    "sklearn": (load_sklearn, ("name",), ()),
    "mnist": (load_mnist, ("directory",), ("train",)),
    "npz": (_load_npz, ("path",), ("inputs", "targets")),
    "xor": (xor, (), ()),
    "and": (and_, (), ()),
    "synthetic": (synthetic_classification, ("n", "shape", "classes"), ("seed",)),
}


def _normalise_step(inputs, bounds):
    if not (isinstance(bounds, (list, tuple)) and len(bounds) == 2):
        raise ConfigError(f"data.preprocess.normalise must be [min, max], got {bounds!r}")
    return normalise(inputs, *bounds)


def _standardise_step(inputs, enabled):
    if not isinstance(enabled, bool):
        raise ConfigError(f"data.preprocess.standardise must be true or false, got {enabled!r}")
    return standardise(inputs) if enabled else inputs


# preprocess step name -> function(inputs, its config value) -> new inputs
PREPROCESSORS = {"normalise": _normalise_step, "standardise": _standardise_step}


def _preprocess(dataset: Dataset, steps) -> Dataset:
    """Apply ``steps`` to ``inputs`` in order; a mapping is taken as its items in order."""
    if isinstance(steps, Mapping):
        steps = [{key: value} for key, value in steps.items()]
    if not isinstance(steps, list) or not all(isinstance(step, Mapping) for step in steps):
        raise ConfigError(f"data.preprocess must be a list of {{step: value}} mappings, got {steps!r}")
    inputs = dataset.section("inputs")
    for step in steps:
        for key, value in step.items():
            if key not in PREPROCESSORS:
                raise ConfigError(f"unknown key data.preprocess.{key}; allowed: {', '.join(PREPROCESSORS)}")
            inputs = PREPROCESSORS[key](inputs, value)
    return dataset.with_section("inputs", inputs)


def dataset_from_config(cfg: Mapping) -> Dataset:
    """The dataset a run file's ``data`` block describes (see the module docstring)."""
    if "source" not in cfg:
        raise ConfigError(f"data.source is missing; allowed: {', '.join(SOURCES)}")
    source = cfg["source"]
    if source not in SOURCES:
        raise ConfigError(f"unknown data.source {source!r}; allowed: {', '.join(SOURCES)}")
    loader, required, optional = SOURCES[source]
    for key in cfg:
        if key not in COMMON_KEYS + required + optional:
            raise ConfigError(f"unknown key data.{key} for source {source!r}; "
                              f"allowed: {', '.join(COMMON_KEYS + required + optional)}")
    for key in required:
        if key not in cfg:
            raise ConfigError(f"data.{key} is required for source {source!r}")

    dataset = loader(**{key: cfg[key] for key in required + optional if key in cfg})
    if "preprocess" in cfg:
        dataset = _preprocess(dataset, cfg["preprocess"])
    if "one_hot" in cfg:
        dataset = dataset.one_hot("targets", cfg["one_hot"])
    return dataset

"""The NumPy extractors: ``.npy`` arrays and ``.npz`` archives, never unpickled.

``allow_pickle=False`` throughout: an object array in a data file would run
code on load, so it is refused with an error naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sigma_core.data.dataset import Dataset
from sigma_core.data.errors import DataError
from sigma_core.errors import ConfigError


def _open(path: Path):
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"file not found: {path}") from None
    except (OSError, ValueError) as error:  # not a NumPy file, or it holds pickled objects
        raise DataError(f"cannot read NumPy file {path}: {error}") from None


def load_numpy(path, sections: Mapping[str, str] | str | None = None) -> Dataset:
    """A dataset from a ``.npy`` array or a ``.npz`` archive.

    For ``.npy``, ``sections`` is the one section's name (default
    ``"inputs"``). For ``.npz``, it maps section names to array names
    (default: every array under its own name).
    """
    path = Path(path)
    loaded = _open(path)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        if sections is not None and not isinstance(sections, str):
            raise ConfigError(f"data.sections: {path} is a single .npy array; give one section name")
        return Dataset({sections or "inputs": loaded}, path.stem)
    with loaded:
        if isinstance(sections, str):
            raise ConfigError(f"data.sections: {path} is an .npz archive; map section names to its arrays")
        chosen = dict(sections) if sections is not None else {name: name for name in loaded.files}
        for section, array in chosen.items():
            if array not in loaded.files:
                raise ConfigError(f"data.sections.{section}: npz file {path} has no array {array!r}; "
                                  f"it has {loaded.files}")
        return Dataset({section: loaded[array] for section, array in chosen.items()}, path.stem)


def load_npz(path, inputs: str = "inputs", targets: str = "targets") -> Dataset:
    """Two arrays of an ``.npz`` archive as ``inputs`` and ``targets`` (the original ``npz`` source)."""
    path = Path(path)
    loaded = _open(path)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise DataError(f"{path} is a single .npy array, not an .npz archive of named arrays")
    with loaded:
        for key, array in (("inputs", inputs), ("targets", targets)):
            if array not in loaded.files:
                raise ConfigError(f"data.{key}: npz file {path} has no array {array!r}; it has {loaded.files}")
        return Dataset({"inputs": loaded[inputs], "targets": loaded[targets]}, str(path))

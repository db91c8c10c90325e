"""The NumPy extractors: ``.npy`` arrays and ``.npz`` archives, read without NumPy's loader.

Each array's header is parsed first, and what it claims is held against the
bytes the file holds and the memory available before anything is allocated
(``np.load`` trusts it: a 80-byte file claiming 10^12 elements fails deep in
NumPy, or not at all). An object array would need unpickling, which runs code
from the file, so it is refused; so are NaN and infinity unless
``allow_non_finite``. Every problem is a :class:`DataError` naming the file.
"""

from __future__ import annotations

import contextlib
import math
import os
import tokenize
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sigma_core import memory
from sigma_core.data.dataset import Dataset, check_finite
from sigma_core.data.errors import DataError
from sigma_core.errors import ConfigError

#: What a damaged file or archive raises from NumPy's header parser or ``zipfile``.
DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError, ValueError,
           TypeError, SyntaxError, tokenize.TokenError, KeyError, OverflowError)
DEFLATE_RATIO = 1032  # deflate expands at most this much: a member claiming more is damaged
HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _array(stream, size: int, what: str, allow_non_finite: bool) -> np.ndarray:
    """The array in ``stream`` (``size`` bytes in all), its header checked before anything is allocated."""
    if size == 0:
        raise DataError(f"{what} is empty")
    try:
        shape, fortran, dtype = HEADERS[np.lib.format.read_magic(stream)](stream)
    except DAMAGED as error:
        raise DataError(f"{what} is not in NumPy's .npy format ({error})") from None
    if dtype.hasobject:
        raise DataError(f"{what} holds pickled Python objects, which Sigma never loads: unpickling runs code "
                        "from the file")
    count = math.prod(shape)
    nbytes, left = count * dtype.itemsize, size - stream.tell()
    if nbytes > left:
        raise DataError(f"{what} claims shape {shape} of {dtype} ({nbytes:,} bytes), but only {left:,} bytes "
                        "follow its header")
    memory.require(nbytes, f"{what} of shape {shape}", DataError)
    array = np.empty(count, dtype)
    view, done = memoryview(array.view(np.uint8)), 0
    while done < nbytes and (read := stream.readinto(view[done:])):
        done += read
    if done < nbytes:
        raise DataError(f"{what} is truncated: {done:,} of its {nbytes:,} bytes are there")
    array = array.reshape(shape, order="F" if fortran else "C")
    return array if allow_non_finite else check_finite(array, what)


@contextlib.contextmanager
def _open(path: Path, allow_non_finite: bool):
    """Yield ``(names, read)``: an .npz archive's array names (None for an .npy file) and ``read(name)``."""
    where = f"cannot read NumPy file {path}:"
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if file.read(2) != b"PK":
                file.seek(0)
                yield None, lambda name: _array(file, size, f"{where} the array", allow_non_finite)
                return
            with zipfile.ZipFile(file) as archive:
                members = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}

                def read(name):
                    info = members[name]
                    with archive.open(info) as stream:
                        limit = min(info.file_size, DEFLATE_RATIO * info.compress_size + 1024)
                        return _array(stream, limit, f"{where} array {name!r}", allow_non_finite)

                yield list(members), read
    except FileNotFoundError:
        raise DataError(f"file not found: {path}") from None
    except DAMAGED as error:
        raise DataError(f"{where} {(error.strerror if isinstance(error, OSError) else None) or error}") from None


def _dataset(sections: dict, path: Path, name: str) -> Dataset:
    try:
        return Dataset(sections, name)
    except DataError as error:
        raise DataError(f"cannot read NumPy file {path}: {error}") from None


def load_numpy(path, sections: Mapping[str, str] | str | None = None, *, allow_non_finite: bool = False) -> Dataset:
    """A dataset from a ``.npy`` array or a ``.npz`` archive.

    For ``.npy``, ``sections`` is the one section's name (default
    ``"inputs"``). For ``.npz``, it maps section names to array names
    (default: every array under its own name).
    """
    path = Path(path)
    with _open(path, allow_non_finite) as (names, read):
        if names is None:
            if sections is not None and not isinstance(sections, str):
                raise ConfigError(f"data.sections: {path} is a single .npy array; give one section name")
            return _dataset({sections or "inputs": read(None)}, path, path.stem)
        if not (sections is None or isinstance(sections, Mapping)):
            raise ConfigError(f"data.sections: {path} is an .npz archive; map section names to its arrays")
        chosen = dict(sections) if sections is not None else {name: name for name in names}
        for section, array in chosen.items():
            if array not in names:
                raise ConfigError(f"data.sections.{section}: npz file {path} has no array {array!r}; it has {names}")
        return _dataset({section: read(array) for section, array in chosen.items()}, path, path.stem)


def load_npz(path, inputs: str = "inputs", targets: str = "targets", *, allow_non_finite: bool = False) -> Dataset:
    """Two arrays of an ``.npz`` archive as ``inputs`` and ``targets`` (the original ``npz`` source)."""
    path = Path(path)
    with _open(path, allow_non_finite) as (names, read):
        if names is None:
            raise DataError(f"{path} is a single .npy array, not an .npz archive of named arrays")
        for key, array in (("inputs", inputs), ("targets", targets)):
            if array not in names:
                raise ConfigError(f"data.{key}: npz file {path} has no array {array!r}; it has {names}")
        return _dataset({"inputs": read(inputs), "targets": read(targets)}, path, str(path))

"""The NumPy extractors (``.npy`` arrays, ``.npz`` archives) and the ``.npy`` reader checkpoints share.

``np.load`` trusts a header: an 80-byte file claiming 10^12 elements fails deep
in NumPy, or not at all. :func:`read_array` holds the claim against the bytes
that follow and the memory available before allocating, and refuses object
arrays (unpickling runs code from the file) and any other array of what is not a real
number (strings, complex numbers). NaN and infinity are refused
unless ``allow_non_finite``. Every problem is a :class:`DataError` naming the file.
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
from sigma_core.reading import check_readable

#: What a damaged file or archive raises from NumPy's header parser or ``zipfile``.
DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError, ValueError,
           TypeError, SyntaxError, tokenize.TokenError, KeyError, OverflowError)
DEFLATE_RATIO = 1032  # deflate expands at most this much: a member claiming more is damaged
NUMBERS = "biuf"  # the dtype kinds an array may hold: booleans, signed and unsigned integers, floats
HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def read_array(stream, size: int, what: str, error: type[Exception] = DataError, kinds: str = NUMBERS) -> np.ndarray:
    """The ``.npy`` array in ``stream`` (``size`` bytes from its start), of a dtype kind in ``kinds`` (checkpoints:
    ``"f"`` for parameters); any problem is ``error`` naming ``what``."""
    if size == 0:
        raise error(f"{what} is empty")
    try:
        shape, fortran, dtype = HEADERS[np.lib.format.read_magic(stream)](stream)
    except DAMAGED as damage:
        raise error(f"{what} is not in NumPy's .npy format ({damage})") from None
    if dtype.hasobject:
        raise error(f"{what} holds pickled Python objects, which Sigma never loads: unpickling runs code from the file")
    if dtype.kind not in kinds:  # strings, complex numbers, dates, records: nothing a network reads as is
        raise error(f"{what} has dtype {dtype}, not {'floating-point' if kinds == 'f' else 'real numbers'}")
    count = math.prod(shape)
    nbytes, left = count * dtype.itemsize, size - stream.tell()
    if nbytes > left:
        raise error(f"{what} claims shape {shape} of {dtype} ({nbytes:,} bytes), "
                    f"but only {left:,} bytes follow its header")
    memory.require(nbytes, f"{what} of shape {shape}", error)
    array = np.empty(count, dtype)
    view, done = memoryview(array.view(np.uint8)), 0
    while done < nbytes and (read := stream.readinto(view[done:])):
        done += read
    if done < nbytes:
        raise error(f"{what} is truncated: {done:,} of its {nbytes:,} bytes are there")
    return array.reshape(shape, order="F" if fortran else "C")


@contextlib.contextmanager
def _open(path: Path, allow_non_finite: bool):
    """Yield ``(names, read)``: an .npz archive's array names (None for an .npy file) and ``read(name)``.

    Any :class:`DataError` inside is reworded to name the file.
    """
    def checked(stream, size, what):
        array = read_array(stream, size, what)
        return array if allow_non_finite else check_finite(array, what)

    check_readable(path, DataError, "NumPy file")
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if file.read(2) != b"PK":
                file.seek(0)
                yield None, lambda name: checked(file, size, "the array")
                return
            with zipfile.ZipFile(file) as archive:
                members = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}

                def read(name):
                    info = members[name]
                    with archive.open(info) as stream:
                        return checked(stream, min(info.file_size, DEFLATE_RATIO * info.compress_size + 1024),
                                       f"array {name!r}")

                yield list(members), read
    except FileNotFoundError:
        raise DataError(f"file not found: {path}") from None
    except (DataError, *DAMAGED) as error:
        raise DataError(f"cannot read NumPy file {path}: {getattr(error, 'strerror', None) or error}") from None


def _dataset(path: Path, names: list, read, chosen: dict, key: str, name: str) -> Dataset:
    for section, array in chosen.items():
        if array not in names:
            raise ConfigError(f"{key}{section}: npz file {path} has no array {array!r}; it has {names}")
    return Dataset({section: read(array) for section, array in chosen.items()}, name)


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
            return Dataset({sections or "inputs": read(None)}, path.stem)
        if not (sections is None or isinstance(sections, Mapping)):
            raise ConfigError(f"data.sections: {path} is an .npz archive; map section names to its arrays")
        chosen = dict(sections) if sections is not None else {name: name for name in names}
        return _dataset(path, names, read, chosen, "data.sections.", path.stem)


def load_npz(path, inputs: str = "inputs", targets: str = "targets", *, allow_non_finite: bool = False) -> Dataset:
    """Two arrays of an ``.npz`` archive as ``inputs`` and ``targets`` (the original ``npz`` source)."""
    path = Path(path)
    with _open(path, allow_non_finite) as (names, read):
        if names is None:
            raise DataError("it is a single .npy array, not an .npz archive of named arrays")
        return _dataset(path, names, read, {"inputs": inputs, "targets": targets}, "data.", str(path))

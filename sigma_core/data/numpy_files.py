"""The NumPy extractors (``.npy`` arrays, ``.npz`` archives) and the ``.npy`` reader checkpoints share.

``np.load`` trusts a header: an 80-byte file claiming 10^12 elements fails deep in NumPy, or not at all.
:func:`read_array` holds the claim against the bytes that follow and the memory available before allocating, and refuses
object arrays (unpickling runs code from the file) and anything but real numbers (strings, complex numbers). NaN and
infinity are refused unless ``allow_non_finite``. Every problem is a :class:`DataError` naming the file.
"""

import math
import os
import tokenize
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sigma_core.compute import memory
from sigma_core.data.dataset import DataError, Dataset, check_finite
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


def load_numpy(path, sections: Mapping[str, str] | str | None = None, *, allow_non_finite: bool = False) -> Dataset:
    """A dataset from a ``.npy`` array or a ``.npz`` archive.

    For ``.npy``, ``sections`` is the one section's name (default ``"inputs"``). For ``.npz``, it maps section
    names to array names (default: every array under its own name).
    """
    return _load(Path(path), sections, allow_non_finite, "data.sections.")


def load_npz(path, inputs: str = "inputs", targets: str = "targets", *, allow_non_finite: bool = False) -> Dataset:
    """Two arrays of an ``.npz`` archive as ``inputs`` and ``targets`` (the original ``npz`` source)."""
    return _load(Path(path), {"inputs": inputs, "targets": targets}, allow_non_finite, "data.")


def _load(path: Path, sections, allow_non_finite: bool, key: str) -> Dataset:
    """:func:`load_numpy`, naming the run file's ``sections`` under ``key``; any other problem names the file."""
    def checked(stream, size, what):
        array = read_array(stream, size, what)
        return array if allow_non_finite else check_finite(array, what)

    check_readable(path, DataError, "NumPy file")
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if file.read(2) != b"PK":
                if not (sections is None or isinstance(sections, str)):
                    raise ConfigError(f"{key[:-1]}: {path} is a single .npy array, not an .npz archive of named arrays")
                file.seek(0)
                return Dataset({sections or "inputs": checked(file, size, "the array")}, path.stem)
            if not (sections is None or isinstance(sections, Mapping)):
                raise ConfigError(f"{key[:-1]}: {path} is an .npz archive; map section names to its arrays")
            with zipfile.ZipFile(file) as archive:
                members = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}
                chosen = {name: name for name in members} if sections is None else dict(sections)
                for section, name in chosen.items():
                    if name not in members:
                        raise ConfigError(f"{key}{section}: npz file {path} has no array {name!r}; it has "
                                          f"{list(members)}")
                arrays = {}
                for section, name in chosen.items():
                    with archive.open(members[name]) as stream:
                        size = min(members[name].file_size, DEFLATE_RATIO * members[name].compress_size + 1024)
                        arrays[section] = checked(stream, size, f"array {name!r}")
                return Dataset(arrays, path.stem)
    except (DataError, *DAMAGED) as error:
        raise DataError(f"cannot read NumPy file {path}: {getattr(error, 'strerror', None) or error}") from None

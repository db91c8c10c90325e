"""The IDX file format of MNIST: the ``idx`` extractor, and IDX input files for ``sigma predict``.

An IDX file is a 4-byte magic number ``00 00 <dtype code> <ndim>``, then
``ndim`` big-endian uint32 dimensions, then the data, big-endian, row-major.
The header is parsed rather than skipped at a fixed offset (the original read
16- or 8-byte headers blindly), and the size it declares is held against the
file (for gzip, against the most deflate expands it) and the memory available
before the data is read: a damaged file is one line, never garbage or a huge allocation.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from sigma_core import DEFLATE_RATIO, DataError, Dataset, check_finite, check_readable, require_memory

IDX_DTYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path) -> np.ndarray:
    """An IDX file (gzip-compressed if its name ends in ``.gz``) as a native-endian array."""
    path = Path(path)
    gz = path.suffix == ".gz"
    check_readable(path, DataError, "IDX file")
    try:
        with (gzip.open if gz else open)(path, "rb") as file:
            magic = file.read(4)
            if len(magic) < 4 or magic[:2] != b"\0\0" or magic[2] not in IDX_DTYPES:
                raise DataError(f"{path} is not an IDX file: bad magic number {magic.hex(' ') or '(empty file)'}, "
                                f"expected 00 00 <dtype code: {', '.join(f'{c:02x}' for c in IDX_DTYPES)}> <ndim>")
            dtype, ndim = IDX_DTYPES[magic[2]], magic[3]
            header_bytes, dimensions = 4 + 4 * ndim, file.read(4 * ndim)
            if len(dimensions) < 4 * ndim:
                raise DataError(f"IDX file {path} is truncated: its {ndim}-dimensional header needs "
                                f"{header_bytes} bytes, the file has {4 + len(dimensions)}")
            shape = struct.unpack(f">{ndim}I", dimensions)
            expected = math.prod(shape) * dtype.itemsize

            def wrong_size(found, short=True):
                return DataError(f"IDX file {path} is {'truncated' if short else 'longer than its header says'}: "
                                 f"shape {shape} of {dtype.name} needs {expected} data bytes after the "
                                 f"{header_bytes}-byte header, found {found}")

            size = os.fstat(file.fileno()).st_size
            if not gz and expected != size - header_bytes:
                raise wrong_size(size - header_bytes, expected > size - header_bytes)
            if gz and expected > DEFLATE_RATIO * size:
                raise wrong_size(f"at most {DEFLATE_RATIO * size} (the most a {size}-byte gzip holds)")
            require_memory(expected, f"IDX file {path}: shape {shape} of {dtype.name}", DataError)
            data, extra = file.read(expected), file.read(1)
            if len(data) < expected or extra:
                raise wrong_size(f"{len(data)}{' and more' if extra else ''}", not extra)
    except (OSError, EOFError, zlib.error) as error:  # missing file, bad or truncated gzip stream
        raise DataError(f"cannot read IDX file {path}: {getattr(error, 'strerror', None) or error}") from None
    return np.frombuffer(data, dtype).reshape(shape).astype(dtype.newbyteorder("="))  # a writable, native copy


def load_idx(path, targets_path=None, *, allow_non_finite: bool = False) -> Dataset:
    """The IDX extractor: ``inputs`` from one IDX file and, optionally, ``targets`` from another."""
    files = {"inputs": path} if targets_path is None else {"inputs": path, "targets": targets_path}
    read = read_idx if allow_non_finite else lambda file: check_finite(read_idx(file), f"IDX file {file}")
    sections = {section: read(file) for section, file in files.items()}
    try:
        return Dataset(sections, Path(path).name)
    except DataError as error:
        raise DataError(f"IDX file{'s' * (len(files) > 1)} {' and '.join(map(str, files.values()))}: {error}") from None


def predict_inputs(path, *, network) -> np.ndarray:
    """The ``sigma predict`` reader: an IDX file's records, raw (the network's input shape is not checked
    here: a mismatch is the network's one-line error)."""
    return read_idx(path)

"""The IDX file format (as used by MNIST) and the MNIST loader built on it.

An IDX file is a 4-byte magic number ``00 00 <dtype code> <ndim>``, then
``ndim`` big-endian uint32 dimensions, then the data, big-endian, row-major.
The header is parsed rather than skipped at a fixed offset (the original read
16- or 8-byte headers blindly), so any IDX file loads, and a damaged one is
reported instead of being read as garbage.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from sigma_core.data.dataset import Dataset
from sigma_core.data.errors import DataError

IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path) -> np.ndarray:
    """Read an IDX file (gzip-compressed if its name ends in ``.gz``) into a native-endian array."""
    path = Path(path)
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as file:
            data = file.read()
    except (OSError, EOFError, zlib.error) as error:  # missing file, bad or truncated gzip stream
        raise DataError(f"cannot read IDX file {path}: {error}") from None

    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        raise DataError(
            f"{path} is not an IDX file: bad magic number {data[:4].hex(' ') or '(empty file)'}, "
            f"expected 00 00 <dtype code: {', '.join(f'{code:02x}' for code in IDX_DTYPES)}> <ndim>"
        )
    dtype, ndim = IDX_DTYPES[data[2]], data[3]
    header_bytes = 4 + 4 * ndim
    if len(data) < header_bytes:
        raise DataError(f"IDX file {path} is truncated: its {ndim}-dimensional header needs "
                        f"{header_bytes} bytes, the file has {len(data)}")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    expected = int(np.prod(shape)) * dtype.itemsize
    actual = len(data) - header_bytes
    if actual != expected:
        problem = "truncated" if actual < expected else "longer than its header says"
        raise DataError(f"IDX file {path} is {problem}: shape {shape} of {dtype.name} needs {expected} data bytes "
                        f"after the {header_bytes}-byte header, found {actual}")
    array = np.frombuffer(data, dtype, offset=header_bytes).reshape(shape)
    return array.astype(dtype.newbyteorder("="))  # a writable, native-endian copy


def _find(directory: Path, stem: str) -> Path | None:
    """``stem`` or ``stem.gz`` in ``directory``, preferring the uncompressed file."""
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def load_mnist(directory, *, train: bool = True, scale: bool = True) -> Dataset:
    """The MNIST training set (60,000) or, with ``train=False``, test set (10,000) from ``directory``.

    Looks for ``train-images-idx3-ubyte`` and ``train-labels-idx1-ubyte`` (or
    ``t10k-...``), each optionally ``.gz``. ``inputs`` are the N×28×28 uint8
    images, divided by 255 into float32 in [0, 1] when ``scale`` is true;
    ``targets`` are the int64 digit labels 0..9.
    """
    directory = Path(directory)
    prefix = "train" if train else "t10k"
    stems = (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte")
    images_path, labels_path = (_find(directory, stem) for stem in stems)
    missing = [f"{stem}[.gz]" for stem, found in zip(stems, (images_path, labels_path)) if found is None]
    if missing:
        raise DataError(f"MNIST files not found in {directory}: {', '.join(missing)}")

    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(f"MNIST files in {directory} do not match: images {images.shape} from {images_path.name}, "
                        f"labels {labels.shape} from {labels_path.name}")
    inputs = images.astype(np.float32) / 255.0 if scale else images
    return Dataset({"inputs": inputs, "targets": labels.astype(np.int64)}, f"mnist-{prefix}")


def load_idx(path, targets_path=None) -> Dataset:
    """The IDX extractor: ``inputs`` from one IDX file and, optionally, ``targets`` from another."""
    sections = {"inputs": read_idx(path)}
    if targets_path is not None:
        sections["targets"] = read_idx(targets_path)
    try:
        return Dataset(sections, Path(path).name)
    except DataError as error:
        raise DataError(f"IDX files {path} and {targets_path} do not match: {error}") from None

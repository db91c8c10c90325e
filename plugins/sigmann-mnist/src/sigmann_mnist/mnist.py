"""MNIST from a local folder or, without one, downloaded once into ``<data dir>/mnist``.

Downloads come from the first mirror that answers, each file's md5 checked
(:func:`sigmann_data.sources.resolve`); the log says where the files are
stored. The files are IDX (:func:`sigmann_mnist.idx.read_idx`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from sigma_core import DataError, Dataset, check_writable, write_error
from sigmann_data.sources import data_dir, resolve

from .idx import read_idx

log = logging.getLogger("sigma")

MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}


def download_mnist(train: bool, directory: Path | None = None) -> Path:
    """Download the MNIST training or test files (if not already there) and return their folder."""
    directory = Path(directory) if directory is not None else data_dir() / "mnist"
    prefix = "train" if train else "t10k"
    log.info("MNIST files are stored in %s", directory)
    missing = [(name, md5) for name, md5 in MNIST_MD5.items()
               if name.startswith(prefix) and not _is_file(directory / name)]
    if missing:
        check_writable(directory, folder=True, what="MNIST folder")  # before anything is downloaded
    for name, md5 in missing:
        try:
            fetched = resolve([mirror + name for mirror in MNIST_MIRRORS], md5=md5, unpack_archives=False)
        except DataError as error:  # offline, most often: the message ends with the way out
            files = " and ".join(name for name in MNIST_MD5 if name.startswith(prefix))
            raise DataError(f"MNIST: {error}; offline, put {files} in {directory}, or in a folder DIR given with "
                            "--set data.directory=DIR") from None
        try:
            fetched.replace(directory / name)
        except OSError as error:
            raise write_error(directory / name, error) from None
    return directory


def _find(directory: Path, stem: str) -> Path | None:
    """``stem`` or ``stem.gz`` in ``directory``, preferring the uncompressed file."""
    return next((directory / name for name in (stem, stem + ".gz") if _is_file(directory / name)), None)


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; a folder that cannot be searched (no permission) is one line naming it."""
    try:
        return path.is_file()
    except OSError as error:
        raise DataError(f"MNIST folder {path.parent}: cannot look in it ({error.strerror or error})") from None


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


def mnist(directory: str | None = None, train: bool = True, scale: bool = True, download: bool = True) -> Dataset:
    """MNIST from ``directory`` or, without one, from ``<data dir>/mnist``, downloading what is missing.

    ``scale`` gives float32 inputs in [0, 1]; ``scale = false`` keeps the
    uint8 pixels. ``download = false`` keeps a run offline: missing files are
    then an error naming the folder.
    """
    if directory is None:
        directory = data_dir() / "mnist"
        if download:
            download_mnist(train, directory=directory)
    return load_mnist(directory, train=train, scale=scale)

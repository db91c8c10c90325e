"""Default datasets by name: ``mnist``, ``iris``, ``wdbc``/``breast_cancer``, ``digits``, ``xor``, ``and``.

The small ones come with scikit-learn or are written out here, so they work
offline. MNIST is read from a local folder when one is given and otherwise
downloaded once, from the first mirror that answers, into
``<data dir>/mnist`` (see :func:`sigma_core.data.cache.data_dir`) with every
file's md5 checked; the log says where the files are stored.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sigma_core.data.cache import data_dir
from sigma_core.data.dataset import Dataset
from sigma_core.data.idx import load_mnist
from sigma_core.data.sklearn_datasets import load_sklearn
from sigma_core.data.sources import resolve

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
    for name, md5 in MNIST_MD5.items():
        if name.startswith(prefix):
            target = directory / name
            if not target.is_file():
                fetched = resolve([mirror + name for mirror in MNIST_MIRRORS], md5=md5, unpack_archives=False)
                target.parent.mkdir(parents=True, exist_ok=True)
                fetched.replace(target)
    return directory


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


def iris() -> Dataset:
    """Fisher's 150 irises: 4 measurements, 3 species (scikit-learn's copy, no download)."""
    return load_sklearn("iris")


def wdbc() -> Dataset:
    """Wisconsin diagnostic breast cancer: 569 records, 30 features, malignant or benign."""
    return load_sklearn("wdbc")


def digits() -> Dataset:
    """scikit-learn's 1,797 8×8 handwritten digits."""
    return load_sklearn("digits")

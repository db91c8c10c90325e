"""The minimal data path: in-memory datasets, epoch iterators and a few loaders.

A :class:`Dataset` is named sections of host NumPy arrays aligned on axis 0;
an iterator yields host batches (dicts of section arrays) one epoch per
``iter()``; the trainer copies each batch into its handler. Loaders cover
scikit-learn's bundled data, MNIST's IDX files, ``.npz`` archives and small
synthetic sets, and :func:`dataset_from_config` picks one from a run file.
"""

from sigma_core.data.config import dataset_from_config
from sigma_core.data.dataset import Dataset, from_arrays
from sigma_core.data.errors import DataError
from sigma_core.data.idx import load_mnist, read_idx
from sigma_core.data.iterators import EpochIterator, MinibatchIterator, UndividedIterator
from sigma_core.data.preprocessing import normalise, one_hot, standardise
from sigma_core.data.sklearn_datasets import load_sklearn
from sigma_core.data.synthetic import and_, synthetic_classification, xor

__all__ = [
    "DataError",
    "Dataset",
    "EpochIterator",
    "MinibatchIterator",
    "UndividedIterator",
    "and_",
    "dataset_from_config",
    "from_arrays",
    "load_mnist",
    "load_sklearn",
    "normalise",
    "one_hot",
    "read_idx",
    "standardise",
    "synthetic_classification",
    "xor",
]

"""The data path: extractors, preprocessing, datasets and iterators.

A :class:`Dataset` is named sections of host NumPy arrays aligned on axis 0.
An iterator yields host batches (dicts of section arrays) one epoch per
``iter()``, optionally prepared ahead by a :class:`PrefetchIterator`; the
trainer copies each batch into its handler. Extractors (CSV, NumPy and
synthetic data here; scikit-learn's datasets, image folders, MNIST and IDX
files from the ``sigmann-*`` plugin distributions; any a plugin registers)
read local files, and :func:`dataset_from_config` picks one from a run file by
name. URLs, archives and checksums are resolved by a registered source, and
``[data] blocks`` by a registered cache (both from ``sigmann-data``).
"""

from sigma_core.data.csv_extractor import read_csv
from sigma_core.data.dataset import Dataset, Records, from_arrays
from sigma_core.data.errors import DataError
from sigma_core.data.iterators import EpochIterator, MinibatchIterator, UndividedIterator
from sigma_core.data.numpy_files import load_npz, load_numpy
from sigma_core.data.prefetch import PrefetchIterator
from sigma_core.data.preprocessing import Preprocessing, normalise, one_hot, permute_axes, standardise
from sigma_core.data.sources import dataset_from_config, resolve_path
from sigma_core.data.synthetic import and_, synthetic_classification, xor

__all__ = [
    "DataError", "Dataset", "EpochIterator", "MinibatchIterator", "PrefetchIterator", "Preprocessing", "Records",
    "UndividedIterator", "and_", "dataset_from_config", "from_arrays", "load_npz", "load_numpy", "normalise",
    "one_hot", "permute_axes", "read_csv", "resolve_path", "standardise", "synthetic_classification", "xor",
]

"""The data path: extractors, preprocessing, datasets and iterators.

A :class:`Dataset` is named sections of host NumPy arrays aligned on axis 0; an iterator yields host batches
one epoch per ``iter()`` (prepared ahead by a :class:`PrefetchIterator` if asked), which the trainer copies into
its handler. :func:`dataset_from_config` picks a registered extractor (NumPy and synthetic data here; CSV and
more from the ``sigmann-*`` plugins) from a run file by name.
"""

from sigma_core.data.dataset import DataError, Dataset, Records, from_arrays, one_hot
from sigma_core.data.iterators import EpochIterator, MinibatchIterator, UndividedIterator
from sigma_core.data.numpy_files import load_npz, load_numpy
from sigma_core.data.prefetch import PrefetchIterator
from sigma_core.data.preprocessing import Preprocessing
from sigma_core.data.sources import dataset_from_config, resolve_path
from sigma_core.data.synthetic import and_, synthetic_classification, xor

__all__ = [
    "DataError", "Dataset", "EpochIterator", "MinibatchIterator", "PrefetchIterator", "Preprocessing", "Records",
    "UndividedIterator", "and_", "dataset_from_config", "from_arrays", "load_npz", "load_numpy", "one_hot",
    "resolve_path", "synthetic_classification", "xor",
]

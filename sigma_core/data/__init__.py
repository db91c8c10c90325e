"""The data path: sources, extractors, preprocessing, datasets and iterators.

A :class:`Dataset` is named sections of host NumPy arrays aligned on axis 0;
a :class:`BlockDataset` serves the same records from an on-disk block cache
within a memory budget. An iterator yields host batches (dicts of section
arrays) one epoch per ``iter()``, optionally prepared ahead by a
:class:`PrefetchIterator`; the trainer copies each batch into its handler.
Extractors (CSV, IDX, NumPy, synthetic data here; scikit-learn's datasets,
image folders and MNIST from the ``sigmann-*`` plugin distributions; any a
plugin registers) read sources (local files, URLs, archives), and
:func:`dataset_from_config` picks one from a run file by name.
"""

from sigma_core.data.blocks import BlockDataset, build_blocks
from sigma_core.data.config import dataset_from_config
from sigma_core.data.csv_extractor import read_csv
from sigma_core.data.dataset import Dataset, from_arrays
from sigma_core.data.errors import DataError
from sigma_core.data.idx import load_idx, read_idx
from sigma_core.data.iterators import EpochIterator, MinibatchIterator, UndividedIterator, UnifiedIterator
from sigma_core.data.numpy_files import load_npz, load_numpy
from sigma_core.data.prefetch import PrefetchIterator
from sigma_core.data.preprocessing import normalise, one_hot, permute_axes, standardise
from sigma_core.data.sources import data_dir, download, resolve
from sigma_core.data.synthetic import and_, synthetic_classification, xor

__all__ = [
    "BlockDataset", "DataError", "Dataset", "EpochIterator", "MinibatchIterator", "PrefetchIterator",
    "UndividedIterator", "UnifiedIterator", "and_", "build_blocks", "data_dir", "dataset_from_config", "download",
    "from_arrays", "load_idx", "load_npz", "load_numpy", "normalise", "one_hot", "permute_axes", "read_csv",
    "read_idx", "resolve", "standardise", "synthetic_classification", "xor",
]

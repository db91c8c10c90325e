"""In-memory datasets: named sections of host NumPy arrays aligned record by record.

Every operation that selects records applies one index to every section, so ``inputs[i]`` always belongs with
``targets[i]``. :class:`Records` is what other kinds of dataset (``sigmann-data``'s block-cached
``BlockDataset``) share, so the iterators serve them all.
"""

from collections.abc import Mapping

import numpy as np

from sigma_core.errors import SigmaError, first_non_finite


class DataError(SigmaError):
    """The data path's one error: a dataset or data file is unusable; the message names the section, label or
    file (a SigmaError, so the CLI prints one line)."""


def split_bounds(n: int, fractions, name: str) -> list[int]:
    """Boundaries ``[0, b1, b2, ...]`` cutting ``n`` items into consecutive parts of ``fractions``."""
    if not fractions or any(f < 0 for f in fractions) or sum(fractions) > 1 + 1e-9:
        raise DataError(f"dataset {name!r}: split fractions {fractions} must be ≥ 0 and sum to at most 1")
    # The epsilon keeps e.g. 0.7 + 0.2 + 0.1 = 0.9999999999999999 from losing the last item.
    return [0] + [min(n, int(np.floor(n * c + 1e-9))) for c in np.cumsum(fractions)]


def check_finite(array: np.ndarray, what: str) -> np.ndarray:
    """``array``, unless it holds NaN or infinity: then a :class:`DataError` naming ``what`` and the first one."""
    if array.dtype.kind in "fc" and not np.isfinite(array).all():
        raise DataError(f"{what} holds {first_non_finite(array)}; set data.allow_non_finite = true to "
                        "train on non-finite values")
    return array


def one_hot(labels, classes: int, *, name: str = "labels") -> np.ndarray:
    """Encode integer ``labels`` of shape ``(N,)`` or ``(N, 1)`` as float32 rows of ``classes`` columns.

    Whole-number floats (from CSV) count as integers; a label outside the classes is an error, not a zero row.
    """
    labels = np.asarray(labels)
    if classes < 1:
        raise DataError(f"{name}: one-hot needs at least 1 class, got {classes}")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if np.issubdtype(labels.dtype, np.floating):
        fractional = labels != np.round(labels)
        if fractional.any():
            record = int(np.flatnonzero(fractional)[0])
            raise DataError(f"{name}: record {record} has label {labels[record]}, not a whole number")
    elif not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{name}: one-hot needs integer labels, got dtype {labels.dtype}")
    labels = labels.astype(np.int64)
    outside = (labels < 0) | (labels >= classes)
    if outside.any():
        record = np.argwhere(outside)[0]
        where = int(record[0]) if len(record) == 1 else tuple(int(i) for i in record)
        raise DataError(f"{name}: label {labels[tuple(record)]} of record {where} is outside "
                        f"0..{classes - 1} ({classes} classes)")
    return np.eye(classes, dtype=np.float32)[labels]


class Records:
    """Selecting records by position, for any dataset with ``name``, ``len()`` and ``select(index, name)``."""

    sorted_parts = False  # whether split parts keep file order rather than the shuffled one
    #: The fitted :class:`Preprocessing` that made these records from raw ones (:func:`dataset_from_config`'s).
    preprocessing = None
    #: Settings the extractor derived from the data (``chars``: its vocabulary), which :func:`build_run` adds to
    #: the run's ``data`` table so its checkpoints record them when the data itself is gone.
    derived: dict = {}

    def take(self, start: int | None = None, stop: int | None = None):
        """Records ``[start, stop)`` with Python slice semantics, e.g. ``take(-2000)`` for the last 2000."""
        shown = ":".join("" if bound is None else str(bound) for bound in (start, stop))
        return self.select(slice(start, stop), f"{self.name}[{shown}]")

    def split(self, *fractions: float, shuffle: bool = True, seed: int = 0) -> tuple:
        """Consecutive, non-overlapping parts of the given fractions of the records (shuffled by ``seed``),
        e.g. ``split(0.8, 0.2)``; part ``i`` holds ``[floor(n * f_0..i-1), floor(n * f_0..i))``."""
        bounds = split_bounds(len(self), fractions, self.name)
        order = np.random.default_rng(seed).permutation(len(self)) if shuffle else np.arange(len(self))
        parts = [order[start:stop] for start, stop in zip(bounds, bounds[1:])]
        return tuple(self.select(np.sort(part) if self.sorted_parts else part, f"{self.name}[split {i}]")
                     for i, part in enumerate(parts))


class Dataset(Records):
    """Named sections of arrays aligned on axis 0, held in host memory and not copied: a dataset
    built from arrays, or sliced with :meth:`take`, shares memory with them, like a NumPy view."""

    def __init__(self, sections: Mapping[str, np.ndarray], name: str = ""):
        if not sections:
            raise DataError(f"dataset {name!r} needs at least one section")
        self.name, self._sections = name, {section: np.asarray(array) for section, array in sections.items()}
        for section, array in self._sections.items():
            if array.ndim == 0:
                raise DataError(f"dataset {name!r}: section {section!r} is a scalar; records run along axis 0")
        lengths = {section: len(array) for section, array in self._sections.items()}
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{section!r} has {length}" for section, length in lengths.items())
            raise DataError(f"dataset {name!r}: sections are not aligned on axis 0 ({listed} records)")
        self._length = next(iter(lengths.values()))

    @property
    def section_names(self) -> tuple[str, ...]:
        return tuple(self._sections)

    def section(self, name: str) -> np.ndarray:
        try:
            return self._sections[name]
        except KeyError:
            raise DataError(f"dataset {self.name!r} has no section {name!r}; it has {list(self._sections)}") from None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index) -> dict[str, np.ndarray]:
        """The records at ``index`` (an index array or a slice) from every section."""
        return {section: array[index] for section, array in self._sections.items()}

    def __repr__(self) -> str:
        shapes = ", ".join(f"{s}={a.shape} {a.dtype}" for s, a in self._sections.items())
        return f"Dataset({self.name!r}, {len(self)} records: {shapes})"

    def select(self, index, name: str | None = None) -> "Dataset":
        """A dataset of the records at ``index``, in that order, from every section."""
        return Dataset(self[index], self.name if name is None else name)

    def shuffle(self, seed: int = 0) -> "Dataset":
        """The records in a seeded random order: one permutation applied to every section."""
        return self.select(np.random.default_rng(seed).permutation(len(self)), f"{self.name}[shuffled]")

    def block_positions(self) -> list[slice]:
        """An in-memory dataset is one block (a block-cached dataset has several: ``sigmann_data.blocks``)."""
        return [slice(None)]

    def epoch_order(self, rng: np.random.Generator) -> np.ndarray:
        """A random order of every record for one epoch of a shuffling iterator."""
        return rng.permutation(len(self))

    def with_section(self, name: str, array: np.ndarray) -> "Dataset":
        """A dataset with section ``name`` added or replaced (the others are shared)."""
        return Dataset({**self._sections, name: array}, self.name)

    def one_hot(self, section: str, classes: int) -> "Dataset":
        """A dataset whose integer-label ``section`` is one-hot encoded over ``classes``."""
        return self.with_section(section, one_hot(self.section(section), classes, name=f"section {section!r}"))


def from_arrays(inputs, targets, one_hot: int | None = None, name: str = "") -> Dataset:
    """A dataset with sections ``inputs`` and ``targets``; ``one_hot=k`` encodes integer targets over k classes."""
    dataset = Dataset({"inputs": inputs, "targets": targets}, name)
    return dataset if one_hot is None else dataset.one_hot("targets", one_hot)

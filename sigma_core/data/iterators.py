"""Iterators that walk a dataset one epoch at a time, yielding host batches (dicts of section arrays).

Each ``iter()`` yields the rest of the current epoch, then advances to the next. Epoch ``e``'s order depends
only on ``(seed, e)``, so a :meth:`~EpochIterator.state` taken mid-epoch resumes a fresh iterator with exactly
the same batches.
"""

import math
from collections.abc import Iterator

import numpy as np

from sigma_core.data.dataset import DataError, Dataset


def state_at(epoch: int, position: int, batches: int) -> dict[str, int]:
    """``{"epoch": e, "position": p}``; a finished epoch reads as the start of the next."""
    return {"epoch": epoch + 1, "position": 0} if position >= batches else {"epoch": epoch, "position": position}


class EpochIterator:
    """Epoch and position bookkeeping; subclasses say which records make up each batch (:meth:`batch_indices`)."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self.epoch = 0
        self.position = 0  # batches of ``epoch`` already handed out

    def batch_indices(self, epoch: int) -> list:
        """The index (array or slice) of each batch of ``epoch``, in order."""
        raise NotImplementedError

    def __len__(self) -> int:  # batches per epoch
        raise NotImplementedError

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        self.set_state(self.state())  # a finished epoch is the start of the next
        batches = self.batch_indices(self.epoch)
        while self.position < len(batches):
            # Counted before the yield: a checkpoint taken while the trainer works on this batch resumes after it.
            self.position += 1
            yield self.dataset[batches[self.position - 1]]
        self.set_state(self.state())

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch on the next ``iter()``."""
        self.set_state({"epoch": epoch, "position": 0})

    def state(self) -> dict[str, int]:
        """Where the iterator stands, for a checkpoint. Read-only: rolling over here would make a running
        ``iter()`` that just handed out its last batch replay the epoch."""
        return state_at(self.epoch, self.position, len(self))

    def set_state(self, state: dict[str, int]) -> None:
        """Resume from a :meth:`state`: the next batch is batch ``position`` of ``epoch``."""
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self):
            raise DataError(f"iterator state {state} is out of range (epoch ≥ 0, 0 ≤ position ≤ {len(self)})")
        self.epoch, self.position = epoch, position


class MinibatchIterator(EpochIterator):
    """Minibatches drawn without replacement, in a fresh random order each epoch.

    A final short batch is kept, or with ``last_batch="drop"`` left out of that epoch.
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 last_batch: str = "keep"):
        super().__init__(dataset)
        if batch_size < 1:
            raise DataError(f"batch_size must be at least 1, got {batch_size}")
        if last_batch not in ("keep", "drop"):
            raise DataError(f"last_batch must be 'keep' or 'drop', got {last_batch!r}")
        self.batch_size, self.shuffle, self.seed, self.last_batch = batch_size, shuffle, seed, last_batch
        if len(self) == 0:  # an epoch without batches would never end a training run
            raise DataError(f"dataset {dataset.name!r} of {len(dataset)} records gives no batch of size "
                            f"{batch_size} with last_batch={last_batch!r}")

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.last_batch == "drop" else math.ceil(n / self.batch_size)

    def batch_indices(self, epoch: int) -> list:
        size = self.batch_size
        if not self.shuffle:  # slices give views, no gather copy
            return [slice(b * size, (b + 1) * size) for b in range(len(self))]
        order = self.dataset.epoch_order(np.random.default_rng([self.seed, epoch]))
        return [order[b * size:(b + 1) * size] for b in range(len(self))]


class UndividedIterator(EpochIterator):
    """Each block of the dataset (an in-memory one is one block) as one batch, in file order."""

    def __init__(self, dataset: Dataset):
        super().__init__(dataset)
        self._blocks = dataset.block_positions()

    def __len__(self) -> int:
        return len(self._blocks)

    def batch_indices(self, epoch: int) -> list:
        return self._blocks

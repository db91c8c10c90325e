"""Prefetching: prepare the next batches in a background thread while the trainer works.

Gathering (or reading blocks from disk) overlaps with the trainer's step;
NumPy releases the GIL while copying, so this pays off even in one process.
The wrapper counts the batches it has *handed out*, not those prepared, so
:meth:`~PrefetchIterator.state` and an early stop resume at the right batch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np

from sigma_core.data.errors import DataError
from sigma_core.data.iterators import state_at

_DONE = object()


class PrefetchIterator:
    """``iterator``'s batches, computed up to ``depth`` ahead in a background thread."""

    def __init__(self, iterator, depth: int = 2, prepare=None):
        if depth < 1:
            raise DataError(f"prefetch depth must be at least 1, got {depth}")
        self.iterator = iterator
        self.depth = depth
        self.prepare = prepare  # batch -> batch on the worker thread, e.g. a GPU handler's pin_batch
        self._progress = None  # (state at iter() start, batches handed out) while iterating

    @property
    def dataset(self):
        return self.iterator.dataset

    def __len__(self) -> int:
        return len(self.iterator)

    def state(self) -> dict[str, int]:
        """Where the *consumer* stands: the worker may have prepared batches beyond it."""
        if self._progress is None:
            return self.iterator.state()
        start, handed_out = self._progress
        return state_at(start["epoch"], start["position"] + handed_out, len(self))

    def set_state(self, state: dict[str, int]) -> None:
        self.iterator.set_state(state)

    def set_epoch(self, epoch: int) -> None:
        self.iterator.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        start = self.iterator.state()
        batches: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def put(item) -> bool:
            """Queue ``item`` unless the consumer stopped; bounded waits, so this cannot block forever."""
            while not stop.is_set():
                try:
                    batches.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False

        def work() -> None:
            try:
                for batch in self.iterator:
                    if not put(batch if self.prepare is None else self.prepare(batch)):
                        return
                put(_DONE)
            except BaseException as error:  # handed to the consumer, raised there
                put(error)

        worker = threading.Thread(target=work, name="sigma-prefetch", daemon=True)
        worker.start()
        handed_out = 0
        self._progress = (start, 0)
        finished = False
        try:
            while True:
                item = batches.get()
                if item is _DONE:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                handed_out += 1  # counted before the yield, like EpochIterator
                self._progress = (start, handed_out)
                yield item
        finally:
            self._progress = None
            stop.set()
            worker.join()
            if not finished:  # stopped early: resume after the last batch handed out, not prepared
                self.iterator.set_state({"epoch": start["epoch"], "position": start["position"] + handed_out})

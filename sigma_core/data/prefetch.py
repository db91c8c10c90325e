"""Prefetching: prepare the next batches in a background thread while the trainer works.

Gathering (or reading blocks from disk) overlaps with the trainer's step; NumPy releases the GIL while copying,
so this pays off even in one process. The wrapper counts the batches it has *handed out*, not those prepared,
so :meth:`~PrefetchIterator.state` and an early stop resume at the right batch.
"""

import contextlib
import queue
import threading
from collections.abc import Iterator

import numpy as np

from sigma_core.data.dataset import DataError
from sigma_core.data.iterators import state_at

_DONE = object()


class PrefetchIterator:
    """``iterator``'s batches, computed up to ``depth`` ahead in a background thread."""

    def __init__(self, iterator, depth: int = 2, prepare=None):
        if depth < 1:
            raise DataError(f"prefetch depth must be at least 1, got {depth}")
        self.iterator, self.depth = iterator, depth
        self.prepare = prepare  # batch -> batch on the worker thread, e.g. a GPU handler's pin_batch
        self._start, self._handed_out = None, 0  # while iterating: the state at iter()'s start, batches handed out

    @property
    def dataset(self):
        return self.iterator.dataset

    def __len__(self) -> int:
        return len(self.iterator)

    def state(self) -> dict[str, int]:
        """Where the *consumer* stands: the worker may have prepared batches beyond it."""
        if self._start is None:
            return self.iterator.state()
        return state_at(self._start["epoch"], self._start["position"] + self._handed_out, len(self))

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
                with contextlib.suppress(queue.Full):
                    batches.put(item, timeout=0.05)
                    return True
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
        self._start, self._handed_out, finished = start, 0, False
        try:
            while (item := batches.get()) is not _DONE:
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                self._handed_out += 1  # counted before the yield, like EpochIterator
                yield item
            finished = True
        finally:
            self._start = None
            stop.set()
            worker.join()
            if not finished:  # stopped early: resume after the last batch handed out, not prepared
                self.iterator.set_state({"epoch": start["epoch"], "position": start["position"] + self._handed_out})

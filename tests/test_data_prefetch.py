"""The prefetching iterator: the same batches and state as the iterator it wraps, prepared on a thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from sigma_core.data import DataError, Dataset, MinibatchIterator, PrefetchIterator


def small_iterator():
    ids = np.arange(40)
    return MinibatchIterator(Dataset({"inputs": ids[:, None] * 1.0, "targets": ids}), 8, seed=4)


def test_prefetch_yields_the_same_batches_and_state():
    plain, prefetched = small_iterator(), PrefetchIterator(small_iterator())
    for _ in range(2):
        expected = [b["targets"] for b in plain]
        got = [b["targets"] for b in prefetched]
        assert all(np.array_equal(a, b) for a, b in zip(expected, got)) and len(got) == len(expected)
    assert prefetched.state() == plain.state() == {"epoch": 2, "position": 0}


def test_prefetch_stopped_early_resumes_after_the_last_batch_handed_out():
    expected = [b["targets"] for b in small_iterator()]
    prefetched = PrefetchIterator(small_iterator(), depth=3)
    for count, _ in enumerate(prefetched, start=1):
        if count == 2:
            break
    time.sleep(0.05)
    assert prefetched.state() == {"epoch": 0, "position": 2}
    rest = [b["targets"] for b in prefetched]
    assert all(np.array_equal(a, b) for a, b in zip(expected[2:], rest)) and len(rest) == 3
    assert not [t for t in threading.enumerate() if t.name == "sigma-prefetch"]


def test_prefetch_passes_errors_to_the_consumer():
    class Failing:
        def __iter__(self):
            yield {"targets": np.zeros(1)}
            raise DataError("block 3 unreadable")

        def state(self):
            return {"epoch": 0, "position": 0}

    with pytest.raises(DataError, match="block 3 unreadable"):
        list(PrefetchIterator(Failing()))

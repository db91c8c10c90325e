"""The spool a threaded hook's events wait in past its queue_size (sigma_core/hooks/spool.py): first in, first out
across the batches it writes and reads, the file touched once a batch, nothing kept of what cannot be pickled."""

import random
import threading
import types

import pytest

from sigma_core.hooks.spool import BATCH, Spool


def _spool(directory=None):
    loop = types.SimpleNamespace(has_directory=directory is not None)
    return Spool(types.SimpleNamespace(loop=loop, directory=directory), "hook-1.pickle")


def test_events_come_back_in_order_however_puts_and_gets_interleave():
    spool, taken, sent = _spool(), [], 0
    chance = random.Random(0)
    for _ in range(16 * BATCH):  # a backlog that grows past several batches, then drains
        if chance.random() < 0.6:
            spool.put(("on_iteration", {}, "iteration", {"total_iterations": sent}))
            sent += 1
        elif spool.waiting:
            taken.append(spool.get()[3]["total_iterations"])
    assert sent - len(taken) > 2 * BATCH  # some waited in the file, not only in memory
    while spool.waiting:
        taken.append(spool.get()[3]["total_iterations"])
    assert taken == list(range(sent))
    spool.close()


def test_the_file_is_written_once_a_batch_and_removed_at_the_end(tmp_path):
    spool = _spool(tmp_path)
    for n in range(BATCH - 1):
        spool.put(n)
    path = tmp_path / "spool" / "hook-1.pickle"
    assert path.exists() and path.stat().st_size == 0  # made at the first event, nothing written yet
    spool.put(BATCH - 1)
    spool._file.flush()
    assert path.stat().st_size > 0
    assert [spool.get() for _ in range(BATCH)] == list(range(BATCH))
    spool.close()
    assert not path.exists()


def test_an_item_that_cannot_be_pickled_raises_and_is_not_kept():
    spool = _spool()
    spool.put(1)
    with pytest.raises(TypeError):
        spool.put(threading.Lock())
    assert spool.waiting == 1 and spool.get() == 1
    spool.close()

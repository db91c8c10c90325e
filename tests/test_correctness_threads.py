"""Issue 10, item 4: with a ``cpu`` handler alive, arithmetic from several threads is what it is alone.

The ``cpu`` handler runs OpenBLAS's jobs on numba's thread pool
(:mod:`sigma_cpu.blas_pool`). OpenBLAS hands every job of every call the
same scratch buffer for its index, so two products running their jobs at once
overwrote each other's panels: plain NumPy products from three threads came
out wrong, and concurrent trainers differed from their solo runs. The callback
now runs one product at a time. Both tests failed before that.
"""

from __future__ import annotations

import threading

import numpy

from sigma_core.model.constructs import Dense, Dropout, Input, SoftmaxCE
from sigma_core.data.dataset import Dataset
from sigma_core.data.iterators import MinibatchIterator
from sigma_core.model.network import Network
from sigma_core import Loop
from sigma_core.training.trainer import Trainer
from sigma_cpu.handler import NumbaHandler
from sigmann_optimisers import Adagrad


def _chain(x, w1, w2):
    """The products of a dense layer's forward and backward passes."""
    h = x @ w1
    out = h @ w2
    back = out @ w2.T
    return h, out, back, x.T @ back


def test_numpy_products_from_several_threads_equal_single_threaded_ones():
    NumbaHandler("float32")  # installs the shared pool, once per process
    rng = numpy.random.default_rng(0)
    inputs = [tuple(rng.standard_normal(shape).astype(numpy.float32) for shape in ((100, 784), (784, 300), (300, 10)))
              for _ in range(4)]
    expected = [_chain(*arrays) for arrays in inputs]
    differing = []

    def work(i):
        for _ in range(20):
            for got, want in zip(_chain(*inputs[i]), expected[i]):
                if not numpy.array_equal(got, want):
                    differing.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not differing, f"{len(differing)} of {20 * 4 * len(inputs)} products differ from single-threaded ones"


def _loop(seed, records):
    """A loop training a fresh network of its own, on its own ``cpu`` handler."""
    network = Network(Input(784) + Dropout(0.2) + Dense(400, "relu") + Dense(200, "relu") + Dense(10) + SoftmaxCE())
    iterator = MinibatchIterator(Dataset(records), 100, seed=seed)
    trainer = Trainer(network, Adagrad(0.02), iterator, name=f"t{seed}")
    trainer.initialise(NumbaHandler("float32", seed=seed))
    return Loop(trainer, epochs=1)


def test_concurrent_trainers_equal_their_solo_runs_bit_for_bit():
    rng = numpy.random.default_rng(1)
    records = {"inputs": rng.random((1000, 784), dtype=numpy.float32), "targets": rng.integers(0, 10, 1000)}
    solo = {}
    for seed in range(3):
        loop = _loop(seed, records)
        loop.run()
        solo[seed] = loop.trainer.network.state_dict()
    loops = [_loop(seed, records) for seed in range(3)]
    for loop in loops:  # each on its own thread, at the same time
        loop.start()
    for loop in loops:
        loop.join()
    for seed, loop in enumerate(loops):
        for pid, array in loop.trainer.network.state_dict().items():
            assert numpy.array_equal(array, solo[seed][pid]), f"trainer {seed}: {pid} differs from its solo run"

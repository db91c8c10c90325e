"""One Ray worker: an actor in its own process, with its own run built from the run file.

The driver is worker 0 and computes its rows itself; workers 1, 2, ... are
these actors. Each builds the run itself (``build_run``: its own handler, of
the trainer's kind and dtype, its own optimiser and its own copy of the data),
so records never travel through the driver, and keeps a replica of the
global state in lockstep with the driver: every global step it completes the
last step's sum (the driver's array, which comes with the step's order,
then the actors' arrays in worker order, so every process gets the same
bits), applies it with the hyperparameters the driver sends (and takes the
summed layer state), then computes its rows of the new step and hands out
their weighted gradients and layer state as one flat array: written in
shared memory when the exchange has some (every actor on the driver's
node), returned otherwise. How the arrays reach the others is the
exchange's business (:mod:`sigmann_ray.exchange`).
"""

from __future__ import annotations

import os
import time

import numpy
import ray

from sigma_core import build_run
from sigmann_ray.flat import add_up, contribute, unflatten
from sigmann_threads import Worker, shard_bounds, worker_failed


@ray.remote
class RayWorker:
    """One worker process: its own run (handler, network, optimiser, data) built from the run file; ``config``'s
    ``handler.name`` is the driver's handler, so ``auto`` means one thing across the cluster."""

    def __init__(self, config: dict, index: int, count: int, seed: int, directory: str):
        self.failure = None  # reported by load(): a failed start as one line naming the worker, not an actor traceback
        try:
            if os.path.isdir(directory):
                os.chdir(directory)
            run = build_run(config)
            run.trainer.initialise(run.handler)
        except Exception as error:
            self.failure = worker_failed(index, error)
            return
        self.worker, self.count = Worker(run.trainer, index, seed), count
        iterator = run.trainer.training_iterator
        self.iterator = getattr(iterator, "iterator", iterator)  # the batches under a PrefetchIterator
        self.batches = (None, None)  # (epoch, batch indices of that epoch)

    def pid(self) -> int:
        return os.getpid()

    def load(self, state: tuple) -> tuple[str, int]:
        """Take the driver's state: (layout of the flat gradient, parameters, optimiser state). Returns the
        id of this worker's node and this process's id."""
        if self.failure is not None:
            raise self.failure
        self.layout, parameters, optimiser = state
        local = self.worker.trainer
        local.network.load_state_dict(parameters)
        local.optimiser.load_state_dict(optimiser, local.handler)
        local.refresh_trainable()
        size = sum(stop - start for _, start, stop, _ in self.layout)
        self.flat, self.total = numpy.zeros(size, local.handler.dtype), numpy.empty(size, local.handler.dtype)
        self.received, self.merging = [], 0.0  # the actors' arrays of the last step; seconds merging since
        self.shared = None  # the exchange's arrays in shared memory, if it has some (attach)
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def attach(self, path: str, shape: tuple) -> None:
        """Map the exchange's arrays in shared memory (:class:`sigmann_ray.exchange.SharedArrays`)."""
        self.shared = numpy.memmap(path, dtype=self.flat.dtype, mode="r+", shape=shape)

    def compute(self, order: tuple) -> tuple:
        """Global step ``order = (counters, hyperparameters, driver)``: first the last step's sum, if
        ``driver`` says there was one (the driver's array itself; or True: every array of the last step is in
        shared memory), applied with those hyperparameters; then this worker's rows of step ``counters``:
        their cost and gradients, weighted by their share of the global batch, as one flat array (in shared
        memory if the exchange has some). Returns ``(cost, records, flat array or None if shared, seconds
        computing, seconds merging)``: merging is the last step's sum and its application here. The flat array
        holds the layer state too, as this step's forward pass left it, weighted as the gradients."""
        if self.failure is not None:
            raise self.failure
        if order is None:  # a compiled graph's first, empty execution (see sigmann_ray.exchange)
            return 0.0, 0, None, 0.0, 0.0
        counters, hyperparameters, driver = order
        step, epoch, position = counters
        try:
            local = self.worker.trainer
            if driver is not None:
                began = time.perf_counter()
                if self.shared is not None:  # the driver's array, then every actor's, in worker order
                    driver, *self.received = self.shared[(step - 1) % 2]
                for name, value in hyperparameters.items():
                    setattr(local.optimiser, name, value)
                gradients, state = unflatten(add_up([driver, *self.received], self.total), self.layout,
                                             local.network)
                local.apply_gradients(gradients, 0.0)
                local.network.load_state_dict(state, partial=True)
                self.merging += time.perf_counter() - began
            if self.batches[0] != epoch:
                self.batches = (epoch, self.iterator.batch_indices(epoch))
            index = self.batches[1][position]
            if isinstance(index, slice):
                index = numpy.arange(*index.indices(len(self.iterator.dataset)))
            bounds = shard_bounds(len(index), self.count)
            rows = index[bounds[self.worker.index]:bounds[self.worker.index + 1]]
            out = self.flat if self.shared is None else self.shared[step % 2][self.worker.index]
            began = time.perf_counter()
            cost = contribute(self.worker, counters, self.iterator.dataset[rows], len(rows) / len(index),
                              self.layout, out)
            merging, self.merging = self.merging, 0.0
            return cost, len(rows), None if self.shared is not None else out, time.perf_counter() - began, merging
        except Exception as error:
            raise worker_failed(self.worker.index, error) from None

    def gather(self, *results) -> None:
        """Every actor's result of this step (a compiled graph's all-gather, whose arrays are in shared
        memory): called once all of them are in, so the next ``compute`` may read them."""

    def step(self, order: tuple, driver, *previous) -> tuple:
        """One global step as one ordinary actor call (Ray's object transfer): the actors' last results
        (``previous``, none after taking the state), whose arrays Ray brings from their nodes, then ``compute``
        of ``order`` with the driver's last array (``driver``, passed on its own so that Ray moves it once)."""
        if previous:
            self.received = [result[2] for result in previous]
        return self.compute((*order, driver))

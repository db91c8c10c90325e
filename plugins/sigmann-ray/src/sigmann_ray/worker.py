"""One Ray worker: an actor in its own process, with its own run built from the run file.

It builds the run itself (``build_run``: its own handler, of the trainer's
kind and dtype, its own optimiser and its own copy of the data), so records
never travel through the driver, and keeps a replica of the global state in
lockstep with the other workers: every global step it applies the last
step's summed gradients with the hyperparameters the driver sends (and
takes the summed layer state), then computes its rows of the new step and
hands out their weighted gradients and layer state as one flat array. How
the arrays reach the others is the exchange's business
(:mod:`sigmann_ray.exchange`); the sum is always taken here, in worker order,
so every process gets the same bits.
"""

from __future__ import annotations

import os
import time

import numpy
import ray

from sigma_core import build_run
from sigmann_ray.flat import add_up, unflatten
from sigmann_threads import Worker, shard_bounds, worker_failed


@ray.remote
class RayWorker:
    """One worker process: its own run (handler, network, optimiser, data) built from the run file."""

    def __init__(self, config: dict, handler_name: str, index: int, count: int, seed: int, directory: str):
        self.failure = None  # reported by load(): a failed start as one line naming the worker, not an actor traceback
        try:
            if os.path.isdir(directory):
                os.chdir(directory)
            run = build_run(config, handler_name=handler_name)
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
        self.summed, self.merging = False, 0.0
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def compute(self, order: tuple) -> tuple:
        """Apply the last step's summed gradients (if ``gather`` left some) with ``order``'s hyperparameters,
        then this worker's part of global step ``order``'s counters: its rows' cost and gradients, weighted by
        their share of the global batch. Returns ``(cost, records, flat gradients, seconds computing, seconds
        merging)``: merging is the last step's sum and its application here. The flat array holds the layer
        state too, as this step's forward pass left it, weighted as the gradients."""
        if self.failure is not None:
            raise self.failure
        if order is None:  # a compiled graph's first, empty execution (see sigmann_ray.exchange)
            return 0.0, 0, None, 0.0, 0.0
        counters, hyperparameters = order
        try:
            local = self.worker.trainer
            if self.summed:
                began = time.perf_counter()
                for name, value in hyperparameters.items():
                    setattr(local.optimiser, name, value)
                gradients, state = unflatten(self.total, self.layout, local.network)
                local.apply_gradients(gradients, 0.0)
                local.network.load_state_dict(state, partial=True)
                self.summed, self.merging = False, self.merging + time.perf_counter() - began
            step, epoch, position = counters
            if self.batches[0] != epoch:
                self.batches = (epoch, self.iterator.batch_indices(epoch))
            index = self.batches[1][position]
            if isinstance(index, slice):
                index = numpy.arange(*index.indices(len(self.iterator.dataset)))
            bounds = shard_bounds(len(index), self.count)
            rows = index[bounds[self.worker.index]:bounds[self.worker.index + 1]]
            cost, began, share = 0.0, time.perf_counter(), len(rows) / len(index)
            if not len(rows):  # fewer records than workers: this one adds nothing
                self.flat.fill(0.0)
            else:
                self.worker.prepare(*counters)
                with local.handler.session():
                    cost, grads = local.gradients(self.iterator.dataset[rows])
                    arrays = {**grads, **local.network.state}
                    for pid, start, stop, shape in self.layout:
                        array = local.handler.host_view(arrays[pid])
                        array = arrays[pid].to_numpy() if array is None else array
                        numpy.multiply(array.reshape(-1), share, out=self.flat[start:stop])
            merging, self.merging = self.merging, 0.0
            return float(cost) * share, len(rows), self.flat, time.perf_counter() - began, merging
        except Exception as error:
            raise worker_failed(self.worker.index, error) from None

    def gather(self, *results) -> float:
        """Every worker's result of this step: their gradients summed, to be applied by the next ``compute``.
        Returns the time.perf_counter() at the end: when this step's last output was ready."""
        if results[0][2] is None:  # the empty execution: nothing to add
            return time.perf_counter()
        began = time.perf_counter()
        add_up([result[2] for result in results], self.total)
        self.summed, ended = True, time.perf_counter()
        self.merging = ended - began
        return ended

    def step(self, order: tuple, *previous) -> tuple:
        """``gather`` of the last step's results (none after taking the state), then ``compute``: one global
        step as one ordinary actor call, whose arguments Ray brings from the other workers' nodes."""
        if previous:
            self.gather(*previous)
        return self.compute(order)


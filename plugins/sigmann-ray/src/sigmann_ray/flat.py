"""The flat gradient: every trainable parameter's gradient in one array, the form the workers exchange.

One array per worker and step is one channel write or one object to move,
and adding the workers' arrays is one pass each. The layout says where each
parameter's gradient sits, and after them each layer state array (batch
norm's running statistics), which the workers weight by their share of the
records as their gradients: the sum is the state every process takes, the
``threads`` operator's rule. The sum is taken in worker order everywhere (the driver's
array first: it is worker 0), so the driver and every worker get the same
bits. Every worker, the driver too, fills its array with :func:`contribute`.
"""

from __future__ import annotations

import math

import numpy


def layout(trainer) -> list:
    """Where each trainable parameter's gradient, then each layer state array, sits in the flat gradient:
    ``(id, start, stop, shape)``."""
    network, places, start = trainer.network, [], 0
    arrays = {**network.parameters, **network.state}
    for pid in [*trainer.optimiser.trainable(list(network.parameters)), *network.state]:
        shape = tuple(arrays[pid].shape)
        places.append((pid, start, start + math.prod(shape), shape))
        start += math.prod(shape)
    return places


def contribute(worker, counters: tuple, shard: dict, share: float, places: list, out: numpy.ndarray) -> float:
    """Worker ``worker``'s part of global step ``counters`` (a :class:`sigmann_threads.Worker`): its rows'
    (``shard``) gradients, then its layer state as their forward pass left it, weighted by ``share`` (its rows'
    part of the global batch) into ``out``; returns their cost, weighted as well. No rows: zeros and no cost."""
    if not len(shard["inputs"]):  # fewer records than workers: this one adds nothing
        out.fill(0.0)
        return 0.0
    worker.prepare(*counters)
    local = worker.trainer
    with local.handler.session():  # the gradients are recycled when it ends: copied into ``out`` before
        cost, grads = local.gradients(shard)
        arrays = {**grads, **local.network.state}
        for pid, start, stop, _ in places:
            array = local.handler.host_view(arrays[pid])
            array = arrays[pid].to_numpy() if array is None else array
            numpy.multiply(array.reshape(-1), share, out=out[start:stop])
        return float(cost) * share


def add_up(flats: list, out: numpy.ndarray) -> numpy.ndarray:
    """The sum of the workers' weighted gradients, in worker order (so every process gets the same bits); the
    first two added in one pass."""
    if len(flats) == 1:
        numpy.copyto(out, flats[0])
        return out
    numpy.add(flats[0], flats[1], out=out)
    for flat in flats[2:]:
        out += flat
    return out


def unflatten(flat: numpy.ndarray, places: list, network) -> tuple[dict, dict]:
    """``(gradients, layer state)`` of ``network`` by id, as views of ``flat``."""
    views = {pid: flat[start:stop].reshape(shape) for pid, start, stop, shape in places}
    return ({pid: view for pid, view in views.items() if pid not in network.state},
            {pid: view for pid, view in views.items() if pid in network.state})

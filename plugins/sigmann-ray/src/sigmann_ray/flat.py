"""The flat gradient: every trainable parameter's gradient in one array, the form the workers exchange.

One array per worker and step is one channel write or one object to move,
and adding the workers' arrays is one pass each. The layout says where each
parameter's gradient sits, and after them each layer state array (batch
norm's running statistics), which the workers weight by their share of the
records as their gradients: the sum is the state every process takes, the
``threads`` operator's rule. The sum is taken in worker order everywhere, so
the driver and every worker get the same bits.
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


def add_up(flats: list, out: numpy.ndarray) -> numpy.ndarray:
    """The sum of the workers' weighted gradients, in worker order (so every process gets the same bits)."""
    numpy.copyto(out, flats[0])
    for flat in flats[1:]:
        out += flat
    return out


def unflatten(flat: numpy.ndarray, places: list, network) -> tuple[dict, dict]:
    """``(gradients, layer state)`` of ``network`` by id, as views of ``flat``."""
    views = {pid: flat[start:stop].reshape(shape) for pid, start, stop, shape in places}
    return ({pid: view for pid, view in views.items() if pid not in network.state},
            {pid: view for pid, view in views.items() if pid in network.state})

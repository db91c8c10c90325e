"""Processor hooks: compute values from the registry and write them under ``shared``.

Reporters require these rather than computing themselves, so a value is
computed once however many hooks read it.
"""

from __future__ import annotations

import time
from collections import deque

import numpy

from .access import read_all, read_number, write
from .base import Hook
from . import timestep
from .timestep import TimeScale


class NumberAccumulator(Hook):
    """Sums ``value`` at each firing; writes the sum (or mean) to ``shared.<value with _>_accumulated``.

    The reader that reports the accumulated value calls :meth:`reset` after
    reading, so each report covers the values since the previous one.
    """

    default_priority = -100  # before the reporters that read it

    def __init__(self, value: str, *, average: bool = True, every=None):
        super().__init__(every or timestep.every(1, "iteration"), parameters={"value": value, "average": average},
                         requires=(value,))
        self.value, self.average = value, average
        self.result = f"shared.{value.replace('.', '_')}_accumulated"
        self._sum, self._count = 0.0, 0

    def invoke(self, registry, resolver):
        self._sum += read_number(resolver, self.value, repr(self))
        self._count += 1
        write(resolver, self.result, self._sum / self._count if self.average else self._sum)

    def reset(self):
        self._sum, self._count = 0.0, 0


class RunningTime(Hook):
    """Times the events of ``scale``: ``shared.time_<scale>_span<span>_last/_average/_min/_max`` in ms.

    The average, minimum and maximum are over the last ``span`` events. The
    span is part of the key because two timers of one scale with different
    spans (the README's MNIST program reports iterations over 32) would
    otherwise overwrite each other's results; equal timers are attached
    once and share theirs. With
    ``remove_extrema`` (and more than two samples) the average leaves out the
    fastest and slowest, so one garbage-collection pause does not skew it.
    """

    default_target = "global"
    default_priority = -1000

    def __init__(self, scale="iteration", *, span: int = 4, remove_extrema: bool = True):
        scale = TimeScale.parse(scale)
        super().__init__(timestep.every(1, scale), parameters={"scale": scale.value, "span": span,
                                                      "remove_extrema": remove_extrema})
        self.key = f"shared.time_{scale.value}_span{span}"
        self.remove_extrema = remove_extrema
        self._times = deque(maxlen=span)
        self._last = None

    def prepare(self, registry, resolver):
        self._last = time.perf_counter()

    def invoke(self, registry, resolver):
        now = time.perf_counter()
        self._times.append((now - self._last) * 1000.0)
        self._last = now
        times = sorted(self._times)
        kept = times[1:-1] if self.remove_extrema and len(times) > 2 else times
        write(resolver, f"{self.key}_last", self._times[-1])
        write(resolver, f"{self.key}_average", sum(kept) / len(kept))
        write(resolver, f"{self.key}_min", times[0])
        write(resolver, f"{self.key}_max", times[-1])


class MetricProcessor(Hook):
    """Mean and standard deviation of the weights and of the last updates (Sigma's update rate).

    Over every parameter whose id matches ``parameters`` (a registry pattern
    under ``network.layers``, e.g. ``"*<dense>.weights"``), pooled. Writes
    ``shared.metrics.weights_mean``, ``..._std``, ``shared.metrics.updates_mean``
    and ``..._std``. Updates come from the optimiser, which publishes them
    only when asked to, so this hook turns that on when training starts.
    """

    default_priority = -1000

    def __init__(self, parameters: str = "*.*", *, every=None):
        super().__init__(every or timestep.every(1, "iteration"), parameters={"parameters": parameters})
        self.pattern = parameters
        self._sources = (f"network.layers.{parameters}", f"optimiser.updates.{parameters}")
        self.required_entries.extend(self._sources)

    def prepare(self, registry, resolver):
        registry["optimiser"]["self"].publish_updates = True

    def invoke(self, registry, resolver):
        for name, pattern in zip(("weights", "updates"), self._sources):
            arrays = [numpy.asarray(value).ravel() for _, value in read_all(resolver, pattern)]
            if arrays:
                pooled = numpy.concatenate(arrays)
                write(resolver, f"shared.metrics.{name}_mean", float(pooled.mean()))
                write(resolver, f"shared.metrics.{name}_std", float(pooled.std()))

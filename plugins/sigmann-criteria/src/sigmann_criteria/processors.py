"""Processors: compute values once, under ``shared``, for however many hooks read them."""

from __future__ import annotations

import time
from collections import deque

import numpy

from .access import read_number, write
from .hook import CriteriaHook
from .cadence import Cadence


class NumberAccumulator(CriteriaHook):
    """Sums ``value`` at each firing into ``shared.<value with _>_accumulated`` (or the mean), until :meth:`reset`."""

    default_priority = -100  # before the reporters that read it

    def __init__(self, value: str, *, average: bool = True, every=None, **options):
        super().__init__(every, parameters={"value": value, "average": average}, requires=(value,), **options)
        self.value, self.average = value, average
        self.result = f"shared.{value.replace('.', '_')}_accumulated"
        self.reset()

    def invoke(self, registry, resolver):
        self._sum += read_number(resolver, self.value, repr(self))
        self._count += 1
        write(resolver, self.result, self._sum / self._count if self.average else self._sum)

    def reset(self):
        self._sum, self._count = 0.0, 0


class RunningTime(CriteriaHook):
    """Times the events of ``scale``: ``shared.time_<scale>_span<span>_last/_average/_min/_max`` in ms.

    Over the last ``span`` events; with ``remove_extrema`` the average leaves out
    the fastest and slowest, so one garbage-collection pause does not skew it.
    """

    default_priority = -1000

    def __init__(self, scale="iteration", *, span: int = 4, remove_extrema: bool = True, **options):
        cadence = Cadence(scale)
        super().__init__(cadence, parameters={"scale": cadence.scale.value, "span": span,
                                              "remove_extrema": remove_extrema}, **options)
        self.key = f"shared.time_{cadence.scale.value}_span{span}"
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
        for part, value in (("last", self._times[-1]), ("average", sum(kept) / len(kept)),
                            ("min", times[0]), ("max", times[-1])):
            write(resolver, f"{self.key}_{part}", value)


class MetricProcessor(CriteriaHook):
    """``shared.metrics.{weights,updates}_{mean,std}``, pooled over the parameters matching ``parameters``.

    ``parameters`` is a pattern under ``network.layers``, e.g. ``"*<dense>.weights"``.
    """

    default_priority = -1000

    def __init__(self, parameters: str = "*.*", *, every=None, **options):
        super().__init__(every, parameters={"parameters": parameters}, **options)
        self._sources = (f"network.layers.{parameters}", f"optimiser.updates.{parameters}")
        self.required_entries.extend(self._sources)

    def prepare(self, registry, resolver):
        registry["optimiser"]["self"].publish_updates = True  # it publishes updates only when asked

    def invoke(self, registry, resolver):
        for name, pattern in zip(("weights", "updates"), self._sources):
            arrays = [numpy.asarray(value).ravel() for _, value in resolver.resolve_get(pattern)]
            if arrays:
                pooled = numpy.concatenate(arrays)
                write(resolver, f"shared.metrics.{name}_mean", float(pooled.mean()))
                write(resolver, f"shared.metrics.{name}_std", float(pooled.std()))

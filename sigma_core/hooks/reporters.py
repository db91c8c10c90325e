"""Reporters: log registry values through the ``sigma.hooks`` logger (stderr in ``sigma train``).

Reporters never print to stdout, which belongs to the command's result. They
report when their time step and criteria say, so "cost on each new minimum"
is ``ValueReporter(["optimiser.cost_total"]).on(Extrema("optimiser.cost_total", "min"))``.
"""

from __future__ import annotations

import logging

from . import timestep
from .access import read_all
from .base import Hook
from .processors import NumberAccumulator, RunningTime
from .scorers import AccuracyScorer, BinaryAccuracyScorer
from .timestep import TimeScale

log = logging.getLogger("sigma.hooks")


def _format(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _where(registry) -> str:
    return f"epoch {registry['epoch']} iteration {registry['iteration']}"


class ValueReporter(Hook):
    """Logs each value (identifiers may use wildcards) with the epoch and iteration."""

    def __init__(self, values, *, every=None):
        values = [values] if isinstance(values, str) else list(values)
        super().__init__(every or timestep.every(1, "iteration"), parameters={"values": tuple(values)},
                         requires=(*values, "epoch", "iteration"))
        self.values = values

    def invoke(self, registry, resolver):
        found = [f"{full_id} = {_format(value)}" for identifier in self.values
                 for full_id, value in read_all(resolver, identifier)]
        log.info("%s: %s", _where(registry), ", ".join(found) or f"no value matches {', '.join(self.values)}")


class AccumulatedValueReporter(Hook):
    """Logs the mean (or sum) of a value over the iterations since its last report."""

    def __init__(self, value: str, *, average: bool = True, every=None):
        super().__init__(every or timestep.every(1, "epoch"), parameters={"value": value, "average": average},
                         requires=("epoch", "iteration"))
        self.accumulator = self.require_hook(NumberAccumulator(value, average=average))
        self.required_entries.append(self.accumulator.result)
        self.label = f"{'mean' if average else 'sum'} of {value}"

    def invoke(self, registry, resolver):
        accumulator = self.required_hooks[0]  # the attached one, which may be an equal hook attached earlier
        (_, value), = read_all(resolver, accumulator.result) or [(None, float("nan"))]
        log.info("%s: %s = %s", _where(registry), self.label, _format(value))
        accumulator.reset()


class EpochIterationReporter(Hook):
    """Logs ``epoch E iteration I``; runs before other hooks of the same event."""

    default_priority = -10000

    def __init__(self, *, every=None):
        super().__init__(every or timestep.every(1, "epoch"), requires=("epoch", "iteration"))

    def invoke(self, registry, resolver):
        log.info("%s", _where(registry))


class RunningTimeReporter(Hook):
    """Logs iterations (or epochs) per second and the time per event: average, min and max over ``span``."""

    default_target = "global"

    def __init__(self, *, span: int = 4, every=None):
        every = every or timestep.every(1, "epoch")
        super().__init__(every, parameters={"span": span})
        timer = self.require_hook(RunningTime(every.scale, span=span))
        self.key = timer.key
        self.required_entries.extend(f"{self.key}_{part}" for part in ("last", "average", "min", "max"))

    def invoke(self, registry, resolver):
        values = {part: read_all(resolver, f"{self.key}_{part}")[0][1] for part in ("last", "average", "min", "max")}
        scale = self.time_step.scale.value
        rate = 1000.0 / values["average"] if values["average"] > 0 else float("inf")
        log.info("%s: %.1f %ss/s (time/%s: average %.2f ms, min %.2f ms, max %.2f ms, last %.2f ms)",
                 _where(registry), rate, scale, scale, values["average"], values["min"], values["max"], values["last"])


class AccuracyReporter(Hook):
    """Logs top-k accuracies (``tops``) or, with ``threshold``, binary accuracy on a validation iterator."""

    default_target = "global"

    def __init__(self, iterator: str = "validation", *, tops=(1,), threshold: float | None = None, every=None):
        every = every or timestep.every(1, TimeScale.EPOCH)
        tops = tuple(int(k) for k in tops)
        super().__init__(every, parameters={"iterator": iterator, "tops": tops, "threshold": threshold})
        if threshold is None:
            self.require_hook(AccuracyScorer(iterator, tops=tops, every=every))
            self.keys = [f"accuracy_top{k}" for k in tops]
        else:
            self.require_hook(BinaryAccuracyScorer(iterator, threshold=threshold, every=every))
            self.keys = ["accuracy"]
        self.iterator = iterator
        self.required_entries.extend(f"shared.{iterator}.{key}" for key in self.keys)

    def invoke(self, registry, resolver):
        parts = [f"{key.removeprefix('accuracy_')} = {read_all(resolver, f'shared.{self.iterator}.{key}')[0][1]:.4f}"
                 for key in self.keys]
        log.info("%s: %s accuracy: %s", _where(registry), self.iterator, ", ".join(parts))

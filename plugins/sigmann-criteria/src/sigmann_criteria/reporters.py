"""Reporters: log registry values through the ``sigma.hooks`` logger (stderr; stdout is the command's result)."""

from __future__ import annotations

import logging

from .access import read
from .hook import CriteriaHook
from .processors import NumberAccumulator, RunningTime
from .scorers import AccuracyScorer, BinaryAccuracyScorer

log = logging.getLogger("sigma.hooks")


def _format(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _where(registry) -> str:
    return f"epoch {registry['epoch']} iteration {registry['iteration']}"


class ValueReporter(CriteriaHook):
    """Logs each value (identifiers may use wildcards) with the epoch and iteration."""

    def __init__(self, values, *, every=None, **options):
        values = [values] if isinstance(values, str) else list(values)
        super().__init__(every, parameters={"values": tuple(values)}, requires=(*values, "epoch", "iteration"),
                         **options)
        self.values = values

    def invoke(self, registry, resolver):
        found = [f"{full_id} = {_format(value)}" for identifier in self.values
                 for full_id, value in resolver.resolve_get(identifier)]
        log.info("%s: %s", _where(registry), ", ".join(found) or f"no value matches {', '.join(self.values)}")


class AccumulatedValueReporter(CriteriaHook):
    """Logs the mean (or sum) of a value over the iterations since its last report."""

    default_scale = "epoch"

    def __init__(self, value: str, *, average: bool = True, every=None, **options):
        super().__init__(every, parameters={"value": value, "average": average}, requires=("epoch", "iteration"),
                         **options)
        accumulator = self.require_hook(NumberAccumulator(value, average=average))
        self.required_entries.append(accumulator.result)
        self.label = f"{'mean' if average else 'sum'} of {value}"

    def invoke(self, registry, resolver):
        accumulator = self.required_hooks[0]
        (_, value), = resolver.resolve_get(accumulator.result) or [(None, float("nan"))]
        log.info("%s: %s = %s", _where(registry), self.label, _format(value))
        accumulator.reset()


class EpochIterationReporter(CriteriaHook):
    """Logs ``epoch E iteration I``; runs before other hooks of the same event."""

    default_scale = "epoch"
    default_priority = -10000

    def __init__(self, *, every=None, **options):
        super().__init__(every, requires=("epoch", "iteration"), **options)

    def invoke(self, registry, resolver):
        log.info("%s", _where(registry))


class RunningTimeReporter(CriteriaHook):
    """Logs iterations (or epochs) per second and the time per event: average, min and max over ``span``."""

    default_scale = "epoch"

    def __init__(self, *, span: int = 4, every=None, **options):
        super().__init__(every, parameters={"span": span}, **options)
        self.key = self.require_hook(RunningTime(self.cadence.scale, span=span)).key
        self.required_entries.extend(f"{self.key}_{part}" for part in ("last", "average", "min", "max"))

    def invoke(self, registry, resolver):
        last, average, low, high = (read(resolver, f"{self.key}_{part}", repr(self))
                                    for part in ("last", "average", "min", "max"))
        scale = self.cadence.scale.value
        rate = 1000.0 / average if average > 0 else float("inf")
        log.info("%s: %.1f %ss/s (time/%s: average %.2f ms, min %.2f ms, max %.2f ms, last %.2f ms)",
                 _where(registry), rate, scale, scale, average, low, high, last)


class AccuracyReporter(CriteriaHook):
    """Logs top-k accuracies (``tops``) or, with ``threshold``, binary accuracy on a validation iterator."""

    default_scale = "epoch"

    def __init__(self, iterator: str = "validation", *, tops=(1,), threshold: float | None = None, every=None,
                 **options):
        tops = tuple(int(k) for k in tops)
        super().__init__(every, parameters={"iterator": iterator, "tops": tops, "threshold": threshold}, **options)
        if threshold is None:
            self.require_hook(AccuracyScorer(iterator, tops=tops, every=self.cadence))
            self.keys = [f"accuracy_top{k}" for k in tops]
        else:
            self.require_hook(BinaryAccuracyScorer(iterator, threshold=threshold, every=self.cadence))
            self.keys = ["accuracy"]
        self.iterator = iterator
        self.required_entries.extend(f"shared.{iterator}.{key}" for key in self.keys)

    def invoke(self, registry, resolver):
        parts = [f"{key.removeprefix('accuracy_')} = {read(resolver, f'shared.{self.iterator}.{key}', repr(self)):.4f}"
                 for key in self.keys]
        log.info("%s: %s accuracy: %s", _where(registry), self.iterator, ", ".join(parts))

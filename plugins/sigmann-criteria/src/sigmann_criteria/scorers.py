"""Scorers: accuracy on one of the trainer's validation iterators, written under ``shared.<iterator>.``."""

from __future__ import annotations

from .access import HookError, write
from .hook import CriteriaHook


class _Scorer(CriteriaHook):
    default_scale = "epoch"
    default_priority = -10

    def __init__(self, iterator: str, every, settings: dict, options: dict):
        super().__init__(every, parameters={"iterator": iterator, **settings}, requires=("trainer.self",), **options)
        self.iterator = iterator

    def _trainer_and_iterator(self, registry):
        trainer = registry["trainer"]["self"]
        if self.iterator not in trainer.validation:
            names = ", ".join(trainer.validation) or "none"
            raise HookError(f"{self!r}: trainer {trainer.name!r} has no validation iterator {self.iterator!r} "
                            f"(it has: {names})")
        return trainer, trainer.validation[self.iterator]


class AccuracyScorer(_Scorer):
    """Multi-class top-k accuracy: writes ``shared.<iterator>.accuracy_top<k>`` for each k and ``.cost``."""

    def __init__(self, iterator: str = "validation", *, tops=(1,), every=None, **options):
        self.tops = tuple(int(k) for k in tops)
        super().__init__(iterator, every, {"tops": self.tops}, options)

    def invoke(self, registry, resolver):
        trainer, iterator = self._trainer_and_iterator(registry)
        report = trainer.evaluate(iterator, top=self.tops)
        for k in self.tops:
            write(resolver, f"shared.{self.iterator}.accuracy_top{k}", float(report[f"top{k}"]))
        write(resolver, f"shared.{self.iterator}.cost", float(report["cost"]))


class BinaryAccuracyScorer(_Scorer):
    """One output per record, a hit when ``output > threshold`` agrees with target > 0.5.

    Writes ``shared.<iterator>.accuracy``.
    """

    def __init__(self, iterator: str = "validation", *, threshold: float = 0.5, every=None, **options):
        self.threshold = float(threshold)
        super().__init__(iterator, every, {"threshold": self.threshold}, options)

    def invoke(self, registry, resolver):
        trainer, iterator = self._trainer_and_iterator(registry)
        last = [layer for layer in trainer.network.layers.values() if not layer.is_cost][-1]
        width = last.output_shape[-1] if last.output_shape else 1
        if width != 1:
            raise HookError(f"{self!r}: needs a network with one output per record, it has {width}")
        report = trainer.evaluate(iterator, threshold=self.threshold)
        write(resolver, f"shared.{self.iterator}.accuracy", report["accuracy"])

"""Scorers: accuracy of the network on one of the trainer's named validation iterators.

They write their results under ``shared.<iterator>.`` so that reporters,
criteria (``shared.validation.accuracy_top1``) and early stopping can read them.
"""

from __future__ import annotations

from . import timestep
from .access import HookError, write
from .base import Hook


def _validation_iterator(registry, name: str, who):
    trainer = registry["trainer"]["self"]
    if name not in trainer.validation:
        names = ", ".join(trainer.validation) or "none"
        raise HookError(f"{who!r}: trainer {trainer.name!r} has no validation iterator {name!r} (it has: {names})")
    return trainer, trainer.validation[name]


class AccuracyScorer(Hook):
    """Multi-class top-k accuracy: writes ``shared.<iterator>.accuracy_top<k>`` for each k and ``.cost``."""

    default_target = "global"
    default_priority = -10

    def __init__(self, iterator: str = "validation", *, tops=(1,), every=None):
        tops = tuple(int(k) for k in tops)
        super().__init__(every or timestep.every(1, "epoch"), parameters={"iterator": iterator, "tops": tops},
                         requires=("trainer.self",))
        self.iterator, self.tops = iterator, tops

    def invoke(self, registry, resolver):
        trainer, iterator = _validation_iterator(registry, self.iterator, self)
        report = trainer.evaluate(iterator, top=self.tops)
        for k in self.tops:
            write(resolver, f"shared.{self.iterator}.accuracy_top{k}", float(report[f"top{k}"]))
        write(resolver, f"shared.{self.iterator}.cost", float(report["cost"]))


class BinaryAccuracyScorer(Hook):
    """One output per record: a hit when ``output > threshold`` agrees with target > 0.5.

    Writes ``shared.<iterator>.accuracy``.
    """

    default_target = "global"
    default_priority = -10

    def __init__(self, iterator: str = "validation", *, threshold: float = 0.5, every=None):
        super().__init__(every or timestep.every(1, "epoch"),
                         parameters={"iterator": iterator, "threshold": float(threshold)}, requires=("trainer.self",))
        self.iterator, self.threshold = iterator, float(threshold)

    def invoke(self, registry, resolver):
        trainer, iterator = _validation_iterator(registry, self.iterator, self)
        width = _prediction_width(trainer)
        if width != 1:
            raise HookError(f"{self!r}: needs a network with one output per record, it has {width}")
        report = trainer.evaluate(iterator, threshold=self.threshold)
        write(resolver, f"shared.{self.iterator}.accuracy", report["accuracy"])


def _prediction_width(trainer) -> int:
    """Width of the predictions: the last non-cost layer's output."""
    layer = [layer for layer in trainer.network.layers.values() if not layer.is_cost][-1]
    shape = layer.output_shape
    return shape[-1] if shape else 1

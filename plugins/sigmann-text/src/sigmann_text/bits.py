"""The ``bits_per_character`` hook: a character model's cost in the unit papers report it in.

Softmax cross-entropy over every step is the mean negative log-likelihood of a
character in nats; divided by ln 2 it is bits per character.
"""

from __future__ import annotations

import logging
import math

from sigma_core.hooks import Hook
from sigma_core.hooks.access import write

log = logging.getLogger("sigma.hooks")


class BitsPerCharacter(Hook):
    """After each epoch: ``shared.bits_per_character.train`` (the epoch's mean training cost) and
    ``shared.bits_per_character.<iterator>`` for each validation iterator, logged and kept in the registry
    (the ``metrics`` monitor records them with ``values = ["shared.bits_per_character.*"]``)."""

    default_scale = "epoch"
    default_target = "global"

    def __init__(self, *, every=None):
        super().__init__(every, requires=("trainer.self", "epoch"))

    def invoke(self, registry, resolver):
        trainer = registry["trainer"]["self"]
        bits = {"train": trainer.epoch_cost / max(trainer.iteration, 1) / math.log(2)}
        for name, iterator in trainer.validation.items():
            bits[name] = trainer.evaluate(iterator)["cost"] / math.log(2)
        for name, value in bits.items():
            write(resolver, f"shared.bits_per_character.{name}", value)
        log.info("epoch %s: bits per character: %s", registry["epoch"],
                 ", ".join(f"{name} {value:.4f}" for name, value in bits.items()))

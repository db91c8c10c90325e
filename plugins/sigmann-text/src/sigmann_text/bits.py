"""The ``bits_per_character`` hook: a character model's cost in the unit papers report it in.

Softmax cross-entropy over every step is the mean negative log-likelihood of a
character in nats; divided by ln 2 it is bits per character.
"""

from __future__ import annotations

import logging
import math

from sigma_core import Hook

log = logging.getLogger("sigma.hooks")


class BitsPerCharacter(Hook):
    """After each epoch: ``bits_per_character.train`` (the epoch's mean training cost) and
    ``bits_per_character.<iterator>`` for each held-out iterator, logged and published as run values
    (the ``metrics`` hook records them with ``values = ["bits_per_character.*"]``)."""

    name = "bits_per_character"

    def on_epoch(self, report):
        bits = {"train": report.cost / math.log(2)}
        bits.update((name, scores["cost"] / math.log(2)) for name, scores in report.validation.items())
        for name, value in bits.items():
            self.run.publish(f"bits_per_character.{name}", value)
        log.info("epoch %s: bits per character: %s", report.epoch,
                 ", ".join(f"{name} {value:.4f}" for name, value in bits.items()))

"""From a validated run config to a trained network: the Python API behind ``sigma train``.

``build_run(config)`` creates the handler, data, network, optimiser and
trainer a run file describes; :class:`Run` trains and reports. People who
prefer code build the same objects directly (see the README).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from . import backend
from .architecture import from_layer_list
from .checkpoint import Checkpoint, load_checkpoint, restore, saver_from_config
from .data import MinibatchIterator, PrefetchIterator, dataset_from_config
from .errors import ConfigError
from .hooks.config import hooks_from_config
from .network import Network
from .trainer import Trainer

log = logging.getLogger("sigma")


@dataclass
class Run:
    """Everything one run file builds, ready to train."""

    config: dict
    handler: object
    trainer: Trainer
    epochs: int
    hooks: list = field(default_factory=list)  # attached to the operator by train()
    history: list = field(default_factory=list)
    seconds: float = 0.0

    def train(self, observers=()) -> dict:
        """Train for the configured epochs and return the result summary."""
        from .operators import SingleWorkerOperator

        if self.trainer.handler is None:
            self.trainer.initialise(self.handler)
        saver = saver_from_config(self.config)
        observers = [*observers, saver] if saver else list(observers)
        operator = SingleWorkerOperator(self.trainer, epochs=self.epochs, observers=observers, hooks=self.hooks)
        started = time.perf_counter()
        self.history = operator.run()
        self.seconds = time.perf_counter() - started
        return self.summary()

    def resume(self, checkpoint):
        """Continue from ``checkpoint`` (a path or a loaded :class:`Checkpoint`) on the next :meth:`train`.

        With the same run config, handler and dtype the continuation is
        bit-identical to a run that was never interrupted. Returns the checkpoint.
        """
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = load_checkpoint(checkpoint)
        if checkpoint.config is not None:
            # How long to train and where to save do not change the arithmetic; anything else may.
            changed = [key for key in _changed_keys(checkpoint.config, self.config)
                       if key != "training.epochs" and not key.startswith("checkpoint.")]
            if changed:
                log.warning("resuming %s with a run config that differs in %s", checkpoint.path.name, ", ".join(changed))
        if self.trainer.handler is None:
            self.trainer.initialise(self.handler)
        restore(self.trainer, checkpoint)
        return checkpoint

    def summary(self) -> dict:
        last = self.history[-1] if self.history else None
        held_out = last.validation.get("validation", {}) if last else {}
        return {
            "name": self.config["name"],
            "handler": self.handler.name,
            "dtype": self.handler.dtype,
            "epochs": self.trainer.epoch,  # epochs done, counting those before a resume
            "seconds": round(self.seconds, 3),
            "cost": last.cost if last else None,
            "accuracy": held_out.get("accuracy"),
            "validation_cost": held_out.get("cost"),
            "parameters": self.trainer.network.parameter_count,
            "history": [
                {"epoch": r.epoch, "cost": r.cost, "seconds": round(r.seconds, 3),
                 "accuracy": r.validation.get("validation", {}).get("accuracy")}
                for r in self.history
            ],
        }


def _changed_keys(old, new, prefix="") -> list[str]:
    """Dotted keys whose values differ between two nested config dicts."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix.rstrip(".") or "(root)"]
    return [changed for key in sorted(set(old) | set(new), key=str)
            for changed in _changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")]


def split_dataset(dataset, split: dict, seed: int):
    """(training, held-out) per the ``[split]`` table: a fraction or [start, stop) ranges."""
    validation = split.get("validation")
    train = split.get("train")
    if isinstance(validation, (int, float)) and not isinstance(validation, bool):
        if not 0.0 < validation < 1.0:
            raise ConfigError(f"split.validation must be a fraction in (0, 1) or [start, stop], got {validation!r}")
        if train is not None:
            raise ConfigError("split.train is only allowed with a [start, stop] split.validation range")
        parts = dataset.split(1.0 - validation, validation, shuffle=split.get("shuffle", True), seed=split.get("seed", seed))
        return parts[0], parts[1]
    ranges = {}
    for key, value in (("validation", validation), ("train", train)):
        if value is None:
            continue
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
            raise ConfigError(f"split.{key} must be [start, stop] record indices, got {value!r}")
        ranges[key] = value
    if "validation" not in ranges:
        raise ConfigError("split.validation is required: a fraction or a [start, stop] range")
    held_out = dataset.take(*ranges["validation"])
    training = dataset.take(*ranges["train"]) if "train" in ranges else dataset.take(0, ranges["validation"][0])
    return training, held_out


def build_optimiser(spec: dict):
    from .optimisers import optimiser_from_config

    return optimiser_from_config(spec)


def build_initialisers(spec: dict) -> dict:
    from .initialisers import initialiser_from_config

    if not isinstance(spec, dict):
        raise ConfigError("initialisers must be a table of pattern = { type = ..., ... }")
    bindings = {}
    for pattern, init in spec.items():
        if not isinstance(init, dict):
            raise ConfigError(f"initialisers.{pattern!r} must be a table like {{ type = \"gaussian\", std = 0.1 }}")
        bindings[pattern] = initialiser_from_config(init)
    return bindings


def build_run(config: dict, *, handler_name: str | None = None) -> Run:
    """Create handler, data, network, optimiser and trainer from a validated config."""
    seed = config["seed"]
    training_cfg = config["training"]
    # Everything a run file can get wrong is checked before the handler is created (which logs its
    # choice), so a bad config is reported as the CLI's one error line and nothing else.
    network = Network(from_layer_list(config["network"]["layers"]), name=config["name"])
    optimiser = build_optimiser(config["optimiser"])
    initialisers = build_initialisers(config["initialisers"])
    hooks = hooks_from_config(config["hooks"])

    dataset = dataset_from_config(config["data"])
    training, held_out = split_dataset(dataset, config["split"], seed)
    iterator = MinibatchIterator(
        training, training_cfg["batch_size"], shuffle=training_cfg["shuffle"], seed=seed,
        last_batch=training_cfg["last_batch"],
    )
    if training_cfg["prefetch"]:  # gather the next batch on a background thread while this one trains
        iterator = PrefetchIterator(iterator, depth=training_cfg["prefetch"])
    validation = MinibatchIterator(held_out, training_cfg["validation_batch_size"], shuffle=False)

    name, source = backend.resolve_handler_name(cli=handler_name, config=config["handler"].get("name"))
    handler = backend.create_handler(name, dtype=config["handler"]["dtype"], seed=seed, source=source)
    trainer = Trainer(
        network,
        optimiser,
        iterator,
        validation={"validation": validation},
        initialisers=initialisers,
        name=config["name"],
        run_config=config,
    )
    log.info("run %s: %d training and %d held-out records, %s parameters on %s",
             config["name"], len(training), len(held_out), f"{network.parameter_count:,}", handler)
    return Run(config, handler, trainer, training_cfg["epochs"], hooks=hooks)

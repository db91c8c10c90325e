"""From a validated run config to a trained network, the Python API behind ``sigma train``: :func:`build_run`
builds what a run file describes (handler, data, network, optimiser, trainer, hooks), :class:`Run` trains it."""

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from sigma_core import plugins

from sigma_core.compute import backend
from sigma_core.model.architecture import from_layer_list
from sigma_core.training.checkpoint import Checkpoint, load_checkpoint, restore
from sigma_core.data import MinibatchIterator, PrefetchIterator, dataset_from_config
from sigma_core.errors import ConfigError, UnknownComponentError
from sigma_core.hooks.checkpoints import checkpoint_hooks_from_config
from sigma_core.hooks.tables import hooks_from_tables
from sigma_core.model.initialisers import check_patterns
from sigma_core.training.loop import Loop, operator_from_config
from sigma_core.model.network import Network
from sigma_core.training.trainer import Trainer

log = logging.getLogger("sigma")


@dataclass
class Run:
    """Everything one run file builds, ready to train."""

    config: dict
    handler: object
    trainer: Trainer
    epochs: int
    hooks: list = field(default_factory=list)  # [[hooks]], [checkpoint]'s and [[monitors]], attached by train()
    history: list = field(default_factory=list)  # the last train()'s epoch reports
    seconds: float = 0.0
    directory: Path | None = None  # runs/<name>/version_N; None: made when a hook first asks (training/rundir.py)
    command_line: list | None = None  # what started the run (without --resume), for the resume commands printed
    loop: Loop | None = None  # the last train()'s: its ``stopped`` says why it ended

    def train(self, hooks=()) -> dict:
        """Train with the operator ``[operator]`` names (default: single_worker), the run file's hooks and
        ``hooks``, for the configured epochs; return the summary."""
        if self.trainer.handler is None:
            self.trainer.initialise(self.handler)
        operator = operator_from_config(self.trainer, self.config.get("operator", {}))
        loop = self.loop = Loop(self.trainer, operator, epochs=self.epochs, hooks=[*self.hooks, *hooks],
                                directory=self.directory, command_line=self.command_line, config=self.config)
        started = time.perf_counter()
        self.history = loop.run()
        if loop.has_directory:  # a later train() continues there
            self.directory = loop.directory
        self.seconds = time.perf_counter() - started
        return self.summary()

    def resume(self, checkpoint):
        """Continue from ``checkpoint`` (a path or a loaded :class:`Checkpoint`, returned) on the next :meth:`train`,
        in the run directory it was saved from if that still exists; with the same run config, handler and dtype,
        bit for bit as if never interrupted."""
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = load_checkpoint(checkpoint)
        saved_in = checkpoint.metadata.get("directory")
        if isinstance(saved_in, str) and Path(saved_in).is_dir():
            self.directory = Path(saved_in)
            with contextlib.suppress(ValueError):  # shown as it was made, when under the current directory
                self.directory = self.directory.relative_to(Path.cwd())
        if checkpoint.config is not None:
            # How long to train, where to save and how steps are compiled (the same bits) do not change the
            # arithmetic; anything else may. (training.replay: the older spelling of training.compile.)
            changed = [key for key in _changed_keys(checkpoint.config, self.config)
                       if key not in ("training.epochs", "training.compile", "training.replay")
                       and not key.startswith("checkpoint.")]
            if changed:
                log.warning("resuming %s with a run config that differs in %s", checkpoint.path.name,
                            ", ".join(changed))
        if self.trainer.handler is None:
            self.trainer.initialise(self.handler)
        restore(self.trainer, checkpoint)
        return checkpoint

    def summary(self) -> dict:
        last = self.history[-1] if self.history else None
        held_out = last.validation.get("validation", {}) if last else {}
        return {
            "name": self.config["name"], "handler": self.handler.name, "dtype": self.handler.dtype,
            "epochs": self.trainer.epoch,  # epochs done, counting those before a resume
            "stopped": self.loop.stopped.reason if self.loop and self.loop.stopped else None,  # null: finished
            "seconds": round(self.seconds, 3), "cost": last.cost if last else None,
            "accuracy": held_out.get("accuracy"), "validation_cost": held_out.get("cost"),
            "parameters": self.trainer.network.parameter_count,
            # hooks that failed and were detached (sigma_core.hooks.dispatch.HookFailure)
            "hook_failures": [{"hook": f.hook, "event": f.event, "message": str(f)}
                              for f in (self.loop.dispatcher.failures if self.loop else ())],
            "history": [{"epoch": r.epoch, "cost": r.cost, "seconds": round(r.seconds, 3),
                         "accuracy": r.validation.get("validation", {}).get("accuracy")} for r in self.history],
        }


def _changed_keys(old, new, prefix="") -> list[str]:
    """Dotted keys whose values differ between two nested config dicts."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix.rstrip(".") or "(root)"]
    return [changed for key in sorted(set(old) | set(new), key=str)
            for changed in _changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")]


def split_dataset(dataset, split: dict, seed: int):
    """(training, held-out) per the ``[split]`` table: a fraction or [start, stop) ranges. Neither may be empty: an
    empty held-out set would silently report nothing."""
    validation, train, n = split.get("validation"), split.get("train"), len(dataset)
    if isinstance(validation, (int, float)) and not isinstance(validation, bool):
        if not 0.0 < validation < 1.0:
            raise ConfigError(f"split.validation must be a fraction in (0, 1) or [start, stop], got {validation!r}")
        if train is not None:
            raise ConfigError("split.train is only allowed with a [start, stop] split.validation range")
        parts = dataset.split(1.0 - validation, validation, shuffle=split.get("shuffle", True),
                              seed=split.get("seed", seed))
    else:
        ranges = {key: value for key, value in (("validation", validation), ("train", train)) if value is not None}
        for key, value in ranges.items():  # validation is never None: validating the run file set its default
            if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)):
                raise ConfigError(f"split.{key} must be [start, stop] record indices, got {value!r}")
            if not 0 <= value[0] <= value[1] <= n:
                raise ConfigError(f"split.{key} = {value} is not within the {n} records of the data "
                                  f"(0 <= start <= stop <= {n})")
        parts = dataset.take(*(train or (0, validation[0]))), dataset.take(*validation)
    for key, part, role in (("train" if train else "validation", parts[0], "training"),
                            ("validation", parts[1], "held-out")):
        if len(part) == 0:
            raise ConfigError(f"split.{key}: the {role} set is empty (the data has {n} records)")
    return parts


def step_compiler(name: str):
    """The step compiler ``training.compile`` names (:meth:`Trainer.compile_step`): None for ``"none"``, the
    highest-ranked one that can run here (or None) for ``"auto"``; one named outright must be able to run here."""
    if name == "none":
        return None
    if name == "auto":
        usable = [component for component in plugins.components("compiler") if component.availability()[0]]
        return max(usable, key=lambda component: component.rank).load() if usable else None
    try:
        component = plugins.get("compiler", name)
    except UnknownComponentError as error:
        raise ConfigError(f"training.compile: {error}") from None
    available, reason = component.availability()
    if not available:
        raise ConfigError(f"training.compile: compiler {name!r} cannot run here: {reason}")
    return component.load()


def build_run(config: dict) -> Run:
    """Create handler, data, network, optimiser and trainer from a validated config (whose ``handler.name`` holds
    ``--handler`` and ``SIGMA_HANDLER`` when a command was given them: :func:`sigma_core.cli.options.run_overrides`)."""
    seed, training_cfg = config["seed"], config["training"]
    # Everything a run file can get wrong is checked before the handler is created (which logs its
    # choice), so a bad config is reported as the CLI's one error line and nothing else.
    network = Network(from_layer_list(config["network"]["layers"]), name=config["name"])
    optimiser = plugins.build("optimiser", config["optimiser"])
    initialisers = {pattern: plugins.build("initialiser", table, where=f'initialisers."{pattern}"')
                    for pattern, table in config["initialisers"].items()}
    hooks = [*hooks_from_tables(config["hooks"]), *checkpoint_hooks_from_config(config),
             *hooks_from_tables(config["monitors"], "monitors")]  # [[monitors]]: the older name for [[hooks]]
    ids = [f"{name}.{param}" for name, layer in network.layers.items() for param in layer.parameter_shapes
           if param not in layer.shared_parameters]  # a shared parameter goes by its owner's id alone
    check_patterns(initialisers, ids, "initialisers")
    freeze = config["optimiser"].get("freeze", ())
    check_patterns([freeze] if isinstance(freeze, str) else freeze, ids, "optimiser.freeze")
    # parameters, gradients and the optimiser's per-parameter memory
    network.check_memory(config["handler"]["dtype"], copies=2 + len(getattr(optimiser, "memory_names", ())))
    plugins.get("operator", config["operator"].get("type", "single_worker"))  # unknown: fails before reading data
    compiler = step_compiler(training_cfg["compile"])

    dataset = dataset_from_config(config["data"])
    network.preprocessing = dataset.preprocessing  # saved with its checkpoints: predictions take raw inputs
    config["data"] = {**dataset.derived, **config["data"]}  # recorded in its checkpoints too (Records.derived)
    training, held_out = split_dataset(dataset, config["split"], seed)
    iterator = MinibatchIterator(training, training_cfg["batch_size"], shuffle=training_cfg["shuffle"], seed=seed,
                                 last_batch=training_cfg["last_batch"])
    if training_cfg["prefetch"]:  # gather the next batch on a background thread while this one trains
        iterator = PrefetchIterator(iterator, depth=training_cfg["prefetch"])
    validation = MinibatchIterator(held_out, training_cfg["validation_batch_size"], shuffle=False)

    handler = backend.create_handler(config["handler"]["name"], dtype=config["handler"]["dtype"], seed=seed)
    if isinstance(iterator, PrefetchIterator):  # a GPU handler copies batches into pinned memory there
        iterator.prepare = getattr(handler, "pin_batch", None)
    trainer = Trainer(network, optimiser, iterator, validation={"validation": validation}, initialisers=initialisers,
                      name=config["name"])
    trainer.compile_step(compiler)
    log.info("run %s: %d training and %d held-out records, %s parameters on %s",
             config["name"], len(training), len(held_out), f"{network.parameter_count:,}", handler)
    return Run(config, handler, trainer, training_cfg["epochs"], hooks=hooks)

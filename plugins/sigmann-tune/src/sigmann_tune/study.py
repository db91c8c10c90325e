"""The Optuna study behind ``sigma tune``: its storage, sampler and pruner, and which of its trials count.

A study lives in an Optuna storage: by default a SQLite file in the run's
folder, out of the source tree (``examples/digits_tune.toml`` of run ``digits``
-> ``runs/digits/digits_tune.db``), named after the run file, so running the
same command again continues it (``load_if_exists``).

**Trials that were cut off.** The process that asks for a trial records a
heartbeat for it every ``heartbeat`` seconds while it runs. A trial whose
heartbeat stopped for two periods (its ``sigma tune`` was killed) is *stale*:
the next ``sigma tune`` on the study marks it FAIL (Optuna's ``fail_stale_trials``)
and enqueues it once more with the same parameters (:func:`retry`); a trial cut
off by Ctrl-C is marked and enqueued the same way at once. Such a trial does
not count towards ``trials``: only trials that ran to their end do (complete,
pruned, or failed with an error of their own, which carries the user attribute
``error``), so no trial is ever counted twice.
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sigma_core import RUNS, ConfigError, describe

#: The user attribute of a trial that failed by an error of its own (as opposed to being cut off).
ERROR = "error"
SAMPLERS = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}


def study_folder(name: str) -> Path:
    """Where the study of run ``name`` and its best trial's run file go: the run's folder (``runs/<name>``)."""
    return (RUNS / name).resolve()


def default_storage(run_file, name: str) -> str:
    """The SQLite URL of the study of ``run_file``, whose run is ``name``: ``runs/<name>/<run file's stem>.db``."""
    return f"sqlite:///{study_folder(name) / Path(run_file).with_suffix('.db').name}"


def storage(url: str, heartbeat: int | None = None, *, create: bool = True) -> RDBStorage:
    """The Optuna storage at ``url`` (any database URL Optuna takes), with heartbeats when ``heartbeat`` is given;
    its tables made unless ``create`` is false (a worker's: the driver made them, and two makers would race)."""
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}  # processes share one file
    if url.startswith("sqlite:///"):
        folder = Path(url.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise ConfigError(f"storage {url}: no folder {folder}")
    try:
        return RDBStorage(url, engine_kwargs=engine, heartbeat_interval=heartbeat,
                          grace_period=2 * heartbeat if heartbeat else None,
                          heartbeat_stale_trial_callback=retry if heartbeat else None,
                          skip_table_creation=not create, skip_compatibility_check=not create)
    except Exception as error:  # a URL SQLAlchemy cannot use, a database it cannot reach
        raise ConfigError(f"storage {url}: {describe(error)}") from None


def pruner(section):
    """The pruner ``[tune] pruner`` names, judging each trial by the objective after every epoch."""
    if section.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=section.startup_trials,
                                           n_warmup_steps=section.warmup_epochs)
    if section.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, section.warmup_epochs),
                                              max_resource=max(section.epochs, 1))
    return optuna.pruners.NopPruner()


def sampler(section, trials: int = 0):
    """The sampler ``[tune] sampler`` names, seeded with ``seed`` plus the ``trials`` the study holds already, so
    that a continued study draws new points rather than the first run's again."""
    seed = section.seed + trials
    if section.sampler == "grid":
        from .space import grid

        return optuna.samplers.GridSampler(grid(section), seed=seed)
    return SAMPLERS[section.sampler](seed=seed)


def open_study(name: str, store: RDBStorage, section) -> optuna.Study:
    """The study ``name`` in ``store``, created or continued; its stale trials are marked failed and enqueued again."""
    study = optuna.create_study(study_name=name, storage=store, pruner=pruner(section),
                                direction=section.direction, load_if_exists=True)
    study.sampler = sampler(section, len(study.get_trials(deepcopy=False)))
    if study.direction.name.lower() != section.direction:
        raise ConfigError(f"study {name!r} {study.direction.name.lower()}s its objective and tune.direction is "
                          f"{section.direction}; give another --study or --storage, or the same direction")
    study.set_user_attr("objective", section.objective)  # what --report calls the value
    optuna.storages.fail_stale_trials(study)
    return study


def load(name: str | None, url: str) -> optuna.Study:
    """A study to report on: ``name``, or the only study at ``url``."""
    names = optuna.get_all_study_names(storage(url))
    if name is None and len(names) == 1:
        name = names[0]
    if name not in names:
        raise ConfigError(f"{url}: " + (f"no study {name!r}; " if name else "") +
                          (f"it holds {', '.join(names)} (name one with --study)" if names else "it holds no study"))
    return optuna.load_study(study_name=name, storage=url)


def counted(trial) -> bool:
    """Whether ``trial`` (frozen) ran to its end, and so counts towards the study's trials."""
    return trial.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
        trial.state == TrialState.FAIL and ERROR in trial.user_attrs)


def cut_off(study, trial, reason: str) -> None:
    """Mark ``trial`` (running, asked by this process) FAIL as cut off by ``reason``, and enqueue it again."""
    trial.set_user_attr("cut_off", reason)
    study.tell(trial, state=TrialState.FAIL)
    retry(study, study.get_trials(deepcopy=False)[trial.number])


def retry(study, trial) -> None:
    """Enqueue a cut-off trial's parameters once more; a retry that is cut off again is given up."""
    if "retry_of" not in trial.user_attrs:
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})

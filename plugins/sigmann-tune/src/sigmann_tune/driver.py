"""The study's driver: asks Optuna for trials, hands them to workers, tells Optuna how they ended.

Only the driver samples (``study.ask`` with the section's distributions) and
records outcomes (``study.tell``), so the study's counts are exact however
many workers train; workers report each epoch's objective straight to the
storage, where the pruner reads it. The driver runs until the study holds
``trials`` trials that ran to their end (see :mod:`sigmann_tune.study`), the
time budget is spent, or a grid is exhausted, keeping ``jobs`` trials
training, and shows the trials as a live table.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.live import Live

from .results import row, table
from .space import Section, apply
from .study import ERROR, counted, cut_off, open_study, storage
from .trial import Task
from .workers import ProcessWorkers, RayWorkers


@dataclass
class Plan:
    """What ``sigma tune RUN_FILE`` was asked to do."""

    run_file: Path
    raw: dict  # the run file's tables, --set applied
    section: Section
    study: str
    storage: str
    jobs: int = 1
    ray: str | None = None
    overrides: list = field(default_factory=list)


def supervise(plan: Plan, console: Console) -> optuna.Study:
    """Run ``plan``'s study to its budget; returns the study. Ctrl-C marks the running trials cut off (they run
    again next time) and propagates."""
    section = plan.section
    store = storage(plan.storage, section.heartbeat)
    study = open_study(plan.study, store, section)
    study_id = store.get_study_id_from_name(plan.study)
    budget = section.trials
    if section.sampler == "grid":
        budget = min(budget, math.prod(len(dimension.grid()) for dimension in section.dimensions))
    deadline = time.monotonic() + section.timeout if section.timeout else math.inf
    distributions, name = section.distributions(), plan.raw.get("name", "run")
    workers = RayWorkers(plan.ray, plan.jobs) if plan.ray else ProcessWorkers(plan.jobs)
    active: dict[int, object] = {}  # trial number -> optuna Trial, training now
    exhausted, beaten = False, time.monotonic()
    try:
        with _view(study, section.objective, console) as live:
            while True:
                done = sum(counted(trial) for trial in study.get_trials(deepcopy=False))
                while (len(active) < workers.capacity and done + len(active) < budget and not exhausted
                       and time.monotonic() < deadline):
                    trial = study.ask(distributions)
                    # At once: a RUNNING trial without a heartbeat is never found stale, should this process die.
                    store.record_heartbeat(store.get_trial_id_from_study_id_trial_number(study_id, trial.number))
                    workers.start(Task(plan.study, plan.storage, trial.number, _config(plan, name, trial),
                                       f"{plan.run_file} (trial {trial.number})", section,
                                       os.getcwd()))
                    active[trial.number] = trial
                if not active:
                    break
                for number, outcome in workers.finished(timeout=0.5):
                    exhausted |= _tell(study, active.pop(number), outcome)
                    if not console.is_terminal:  # a file or a pipe: a line per trial as it ends
                        console.print(row(study.get_trials(deepcopy=False)[number], section.objective))
                if time.monotonic() - beaten >= section.heartbeat / 2:  # this process is alive: its trials are too
                    for number in active:
                        store.record_heartbeat(store.get_trial_id_from_study_id_trial_number(study_id, number))
                    optuna.storages.fail_stale_trials(study)  # those of a sigma tune that died meanwhile
                    beaten = time.monotonic()
                live.update(table(study, section.objective, rows=20))
    except KeyboardInterrupt:
        for trial in active.values():
            cut_off(study, trial, "interrupted (Ctrl-C)")
        raise
    finally:
        workers.close()
    return study


def _view(study, objective: str, console: Console):
    """The live table on a terminal. Written to a file or a pipe, a live table would come out once, at the end,
    without its last line's newline; there the table is printed when the study ends, as wide as it is."""
    if console.is_terminal:
        return Live(table(study, objective, rows=20), console=console, refresh_per_second=2)
    return _TableAtEnd(study, objective, console)


@dataclass
class _TableAtEnd:
    study: optuna.Study
    objective: str
    console: Console

    def __enter__(self):
        return self

    def update(self, view) -> None:
        """A live table's refresh: nothing to do here."""

    def __exit__(self, *exc_info):
        self.console.print(table(self.study, self.objective))


def _config(plan: Plan, name: str, trial) -> dict:
    """The trial's run: the run file with the trial's parameters, named ``<name>-trial-<number>``."""
    config = apply(plan.raw, trial.params)
    config["name"] = f"{name}-trial-{trial.number}"
    return config


def _tell(study, trial, outcome: dict) -> bool:
    """Record how ``trial`` ended; True when the grid sampler says the grid is done."""
    state = outcome["state"]
    if state in ("error", "died"):  # the trial's own failure: it counts, and is not tried again
        trial.set_user_attr(ERROR, outcome.get("error") or outcome["reason"])
    try:
        if state == "complete":
            study.tell(trial, outcome["value"])
        else:
            study.tell(trial, state=TrialState.PRUNED if state == "pruned" else TrialState.FAIL)
    except RuntimeError as error:  # the grid sampler stops the study in tell(), which only optimize() allows
        if "Study.stop" not in str(error):
            raise
        return True
    return False

"""One trial, in the process or Ray task that trains it: the run file with the trial's parameters, trained.

The trial's run is named ``<name>-trial-<number>``, so its checkpoints,
metrics, TensorBoard logs and plots go where a run of that name puts them,
through the run file's own hooks, and no two trials mix. :class:`ReportToOptuna`
reports the objective after every epoch to the study and stops the run when
the pruner says so.

A worker process serves trials one after another (:func:`serve`); a Ray task
runs :func:`run_trial` itself.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from dataclasses import dataclass

import numpy
import optuna

from sigma_core import Hook, build_run, describe, validate_run

from .study import pruner, storage


@dataclass(frozen=True)
class Task:
    """What a worker needs to train one trial; plain data, so it travels to a process or a Ray task."""

    study: str
    storage: str
    number: int
    config: dict  # the run file's tables, the trial's parameters set, no [tune]
    source: str  # names the run in messages
    section: object  # the checked [tune] section (sigmann_tune.space.Section): objective and pruner
    directory: str  # the working directory of `sigma tune`, against which the run file's paths resolve


def run_trial(task: Task) -> dict:
    """Train ``task``'s trial; the outcome as ``{"state": "complete" | "pruned" | "error", ...}``, never raised."""
    started = time.perf_counter()
    try:
        outcome = _train(task)
    except Exception as error:  # the trial's own failure: reported, and the study goes on
        outcome = {"state": "error", "error": describe(error)}
    return {**outcome, "seconds": time.perf_counter() - started}


def _train(task: Task) -> dict:
    if os.path.isdir(task.directory):  # a Ray worker starts elsewhere
        os.chdir(task.directory)
    store = storage(task.storage, create=False)
    study = optuna.load_study(study_name=task.study, storage=store, pruner=pruner(task.section),
                              sampler=optuna.samplers.RandomSampler())  # samples nothing: the driver did
    trial_id = store.get_trial_id_from_study_id_trial_number(store.get_study_id_from_name(task.study), task.number)
    trial = optuna.trial.Trial(study, trial_id)
    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    run = build_run(validate_run(task.config, source=task.source))
    reporter = ReportToOptuna(trial, task.section.objective, prune=task.section.pruner != "none")
    with numpy.errstate(all="ignore"):  # an overflow is reported by the non-finite checks, as in sigma train
        summary = run.train([reporter])
    if run.directory is not None:  # where a trials view (optuna-dashboard) sends the user for the trial's curves
        trial.set_user_attr("run", str(run.directory))
    if reporter.value is None:
        return {"state": "error", "error": "the run ended before its first epoch did"}
    state = "pruned" if reporter.pruned else "complete"
    return {"state": state, "value": reporter.value, "epochs": summary["epochs"], "accuracy": summary["accuracy"]}


class ReportToOptuna(Hook):
    """Reports the objective to an Optuna trial after each epoch; stops the run (``run.command("stop")``, the
    documented way a hook ends a run) when the study's pruner prunes the trial, the reason saying so: the run's
    stop line reads "pruned at epoch 2: validation.accuracy 0.4120", not "a stop command"."""

    name = "tune"
    order = 100  # with the stoppers: after the hooks whose results it reads

    def __init__(self, trial, objective: str, *, prune: bool):
        self.trial, self.objective, self.prune = trial, objective, prune
        self.value, self.pruned = None, False

    def on_epoch(self, report):
        self.value = float(self.run.values[self.objective])
        self.trial.report(self.value, report.epoch)
        if self.prune and self.trial.should_prune():
            self.pruned = True
            self.run.command("stop", reason=f"pruned at epoch {report.epoch}: {self.objective} {self.value:.4f}, "
                             "behind the study's other trials there")


def serve(connection) -> None:
    """A worker process: train the tasks that arrive on ``connection`` one by one, until it closes.

    Ctrl-C is the driver's to handle (it marks the trials cut off and ends the workers); a worker whose driver
    died ends itself, so no trial trains on for nobody.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="sigma-tune-watch").start()
    while True:
        try:
            task = connection.recv()
        except EOFError:
            return
        connection.send(run_trial(task))

"""What a study shows: its trials as a table, the best trial's run file, and Optuna's plots as PNGs."""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path

import tomlkit
from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

from sigma_core import apply_override, atomic_write

from .space import literal
from .study import ERROR, counted

STYLES = {TrialState.COMPLETE: "green", TrialState.PRUNED: "yellow", TrialState.FAIL: "red",
          TrialState.RUNNING: "cyan", TrialState.WAITING: "dim"}


def best_trial(study):
    """The best complete trial, or None while there is none."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    pick = max if study.direction.name == "MAXIMIZE" else min
    return pick(complete, key=lambda trial: trial.value)


def table(study, objective: str = "objective", *, rows: int | None = None) -> Table:
    """The study's trials (the last ``rows`` of them, and the best), one line each: number, one column per
    parameter, objective, state and time; the best is starred."""
    trials = study.get_trials(deepcopy=False)
    best = best_trial(study)
    shown = trials if rows is None or len(trials) <= rows else trials[-rows:]
    if best is not None and best not in shown:
        shown = [best, *shown]
    keys = list(dict.fromkeys(key for trial in trials for key in trial.distributions))
    done = sum(counted(trial) for trial in trials)
    view = Table(title=f"study {study.study_name}: {done} trial{'s' * (done != 1)} done", title_justify="left")
    view.add_column("trial", justify="right")
    for header in headers(keys):
        view.add_column(header, justify="right", overflow="fold")
    view.add_column(objective, justify="right", min_width=7, overflow="fold")
    view.add_column("state", min_width=11, overflow="fold")
    view.add_column("time", justify="right")
    for trial in shown:
        star = " *" if best is not None and trial.number == best.number else ""
        values = [_number(trial.params[key]) if key in trial.params else "" for key in keys]
        view.add_row(f"{trial.number}{star}", *values, _value(trial), _state(trial), _duration(trial),
                     style="bold" if star else None)
    return view


def row(trial, objective: str) -> str:
    """One line for a trial that ended, as a log shows it: ``trial 3: pruned at epoch 2, validation.accuracy 0.4120
    (learning_rate=0.0001, ...) in 1.2s``."""
    value, took = _value(trial).partition(" @")[0] or "none", _duration(trial)
    return f"trial {trial.number}: {_state(trial)}, {objective} {value} ({parameters(trial.params)}) in {took}"


def console(stderr: bool = False) -> Console:
    """Where tables and lines go: on a terminal, as wide as it is (columns fold to fit); in a file or a pipe,
    as wide as they are, where rich would cut them to 80 columns."""
    terminal = Console(stderr=stderr)
    return terminal if terminal.is_terminal else Console(stderr=stderr, width=10_000)


def headers(keys: list[str]) -> list[str]:
    """Each key's shortest tail of dotted parts that no other key ends with, as a column header
    (``optimiser.learning_rate`` -> ``learning_rate``); a name as short as ``p`` keeps its table (``layers[2].p``)."""
    tails = []
    for key in keys:
        parts = key.split(".")
        for length in range(1 if len(parts[-1]) > 3 else min(2, len(parts)), len(parts) + 1):
            tail = ".".join(parts[-length:])
            if not any(other != key and (other == tail or other.endswith("." + tail)) for other in keys):
                break
        tails.append(tail)
    return tails


def parameters(params: dict) -> str:
    return ", ".join(f"{key}={_number(value)}" for key, value in params.items())


def _number(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _value(trial) -> str:
    if trial.value is not None:
        return f"{trial.value:.4f}"
    if trial.intermediate_values:  # pruned, or running: the last epoch's
        step = max(trial.intermediate_values)
        return f"{trial.intermediate_values[step]:.4f} @{step}"
    return ""


def _state(trial) -> str:
    style = STYLES.get(trial.state, "")
    text = trial.state.name.lower()
    if trial.state == TrialState.PRUNED and trial.intermediate_values:
        text += f" at epoch {max(trial.intermediate_values)}"
    elif trial.state == TrialState.FAIL:
        text += f": {trial.user_attrs.get(ERROR) or 'cut off, ' + trial.user_attrs.get('cut_off', 'no heartbeat')}"
    elif "retry_of" in trial.user_attrs:
        text += f" (retry of {trial.user_attrs['retry_of']})"
    return f"[{style}]{text}[/]" if style else text


def _duration(trial) -> str:
    if trial.datetime_start is None:
        return ""
    end = trial.datetime_complete or datetime.datetime.now()
    return f"{(end - trial.datetime_start).total_seconds():.1f}s"


def write_best(run_file: Path, folder: Path, trial, overrides=(), *, name: str, description: str) -> Path:
    """Write the run file of ``trial`` into ``folder`` (``digits_tune.toml`` -> ``digits_tune-best.toml``):
    the file as written (comments kept), ``overrides`` (``--set``) and the trial's parameters set, run name
    ``name``, no ``[tune]`` section. ``sigma train`` trains it as the trial did."""
    document = tomlkit.parse(run_file.read_text(encoding="utf-8"))
    document.pop("tune", None)
    for override in overrides:
        apply_override(document, override)
    for key, value in trial.params.items():
        apply_override(document, f"{key.replace('[', '.').replace(']', '')}={literal(value)}")
    document["name"] = name
    path = folder / f"{run_file.stem}-best.toml"
    text = f"# {description}\n{tomlkit.dumps(document)}"
    with atomic_write(path, "w", what="the best trial's run file") as stream:
        stream.write(text)
    return path


def plots(study, folder: Path) -> tuple[list[Path], list[str]]:
    """Optuna's optimisation history, parameter importances and parallel coordinates as PNGs in ``folder``
    (``<study>-history.png``, ...); returns the files written and, for those that could not be drawn, why."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as pyplot
    from optuna.visualization import matplotlib as optuna_plots

    written, skipped = [], []
    for suffix, draw in (("history", optuna_plots.plot_optimization_history),
                         ("importances", optuna_plots.plot_param_importances),
                         ("parallel", optuna_plots.plot_parallel_coordinate)):
        path = folder / f"{study.study_name}-{suffix}.png"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna's matplotlib plots are marked experimental
                axes = draw(study)
        except Exception as error:  # e.g. importances of a study with fewer than two complete trials
            skipped.append(f"{path.name}: {error}")
            continue
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
        figure.set_size_inches(10, 6)
        with atomic_write(path, what="a plot") as stream:
            figure.savefig(stream, format="png", dpi=100, bbox_inches="tight")
        pyplot.close(figure)
        written.append(path)
    return written, skipped

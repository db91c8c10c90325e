"""``sigma tune RUN_FILE``: search the ``[tune]`` section's space; ``sigma tune --report STUDY``: show a study."""

from __future__ import annotations

import shlex
import sys
import warnings
from pathlib import Path

from sigma_core import ConfigError, cli_options


def add_parser(cli) -> None:
    parser = cli.add_parser(
        "tune", parents=[cli_options.HANDLER, cli_options.DEBUG],
        help="search hyperparameters with Optuna: the run file's [tune] section",
        description="Train the run file once per trial, with the values its [tune] section searches, and keep the "
        "study in an Optuna storage (default: a SQLite file in the run's folder, runs/<name>/), so that the same "
        "command continues it. At the end the best trial's run file is written there too.")
    parser.add_argument("config", nargs="?", metavar="RUN_FILE", help="run file (TOML) with a [tune] section")
    parser.add_argument("--trials", type=cli_options.ranged("int >= 1"), metavar="N",
                        help="trials the study should hold, counting earlier runs (default: tune.trials)")
    parser.add_argument("--timeout", type=cli_options.ranged("number > 0"), metavar="SECONDS",
                        help="start no trial after this (default: tune.timeout)")
    parser.add_argument("--jobs", type=cli_options.ranged("int >= 1"), default=1, metavar="N",
                        help="trials at once, each in its own process (or Ray task)")
    parser.add_argument("--ray", metavar="ADDRESS", help="train trials as Ray tasks on the cluster at ADDRESS "
                        "(auto: the one this machine belongs to; local: a Ray instance started here)")
    parser.add_argument("--storage", metavar="URL", help="the study's Optuna storage, any database URL "
                        "(default: sqlite:///runs/<name>/<run file's name>.db)")
    parser.add_argument("--study", metavar="NAME", help="the study's name (default: the run file's name)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a run-file key for every trial, as sigma train --set (repeatable)")
    parser.add_argument("--report", metavar="STUDY", help="show a study instead: a run file, a SQLite file or a "
                        "storage URL; prints its trials and writes Optuna's plots as PNGs")
    parser.add_argument("--out", metavar="DIR", help="--report: where the PNGs go (default: beside the storage)")
    parser.set_defaults(run=run_tune)


def run_tune(args) -> int:
    if args.report:
        return report(args)
    if not args.config:
        raise ConfigError("sigma tune: give a run file with a [tune] section, or --report STUDY")
    plan = _plan(args)  # everything the study needs is checked before it is opened
    from optuna import logging as optuna_logging
    from optuna.exceptions import ExperimentalWarning
    from .driver import supervise
    from .results import best_trial, console, parameters, table, write_best
    from .study import study_folder

    optuna_logging.set_verbosity(optuna_logging.WARNING)  # the table says what Optuna would log per trial
    stderr = console(stderr=True)
    again = shlex.join(["sigma", *sys.argv[1:]]) if sys.argv[1:2] == ["tune"] else f"sigma tune {args.config}"
    try:
        with warnings.catch_warnings():  # Optuna's: heartbeats are "experimental" and "meant for optimize()"
            warnings.simplefilter("ignore", ExperimentalWarning)
            warnings.filterwarnings("ignore", "Heartbeat of storage")
            study = supervise(plan, stderr)
    except KeyboardInterrupt:
        print(f"interrupted: the running trials will run again; continue with: {again}", file=sys.stderr)
        return 130
    best = best_trial(study)
    if best is None:
        stderr.print(table(study, plan.section.objective))
        print(f"study {plan.study}: no trial completed ({plan.storage})")
        return 1
    name = plan.raw.get("name", "run")
    path = write_best(plan.run_file, study_folder(name), best, plan.overrides, name=f"{name}-best",
                      description=f"sigma tune: trial {best.number} of study {plan.study} ({plan.storage}), "
                      f"{plan.section.objective} {best.value:.6g}")
    print(f"best: trial {best.number}, {plan.section.objective} {best.value:.4f} ({parameters(best.params)}); "
          f"run file {path} (train it with: sigma train {shlex.quote(str(path))}); study {plan.study} in "
          f"{plan.storage}")
    print(f"the trials side by side: optuna-dashboard {shlex.quote(plan.storage)} (pip install optuna-dashboard)")
    return 0


def _plan(args):
    import dataclasses
    import tomllib

    from sigma_core import apply_override, cli_options, load_run_file

    from .driver import Plan
    from .space import read_section
    from .study import default_storage, study_folder

    overrides = cli_options.run_overrides(args)
    load_run_file(args.config, overrides)  # the file readable, TOML, and right outside [tune]: else one line
    run_file = Path(args.config)
    raw = tomllib.loads(run_file.read_text(encoding="utf-8"))
    for override in overrides:
        apply_override(raw, override)
    section = read_section(raw, str(run_file))
    given = {"trials": args.trials, "timeout": args.timeout}
    section = dataclasses.replace(section, **{key: value for key, value in given.items() if value is not None})
    name = raw.get("name", "run")
    if not args.storage:
        study_folder(name).mkdir(parents=True, exist_ok=True)
    return Plan(run_file, raw, section, args.study or run_file.stem, args.storage or default_storage(run_file, name),
                jobs=args.jobs, ray=args.ray, overrides=overrides)


def report(args) -> int:
    from rich.console import Console

    from sigma_core import load_run_file

    from .results import console, plots, table
    from .study import default_storage, load

    target = args.report
    if "://" in target:
        url, name, folder = target, args.study, Path.cwd()
    elif target.endswith(".toml"):
        url = default_storage(target, load_run_file(target)["name"])
        name, folder = args.study or Path(target).stem, Path(url.removeprefix("sqlite:///")).parent
    elif Path(target).is_file():
        url, name, folder = f"sqlite:///{Path(target).resolve()}", args.study, Path(target).resolve().parent
    else:
        raise ConfigError(f"--report {target}: not a run file, a SQLite file or a storage URL")
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise ConfigError(f"--report {target}: no study there yet ({url.removeprefix('sqlite:///')} does not exist)")
    study = load(name, url)
    console().print(table(study, study.user_attrs.get("objective", "objective")))
    folder = Path(args.out) if args.out else folder
    written, skipped = plots(study, folder)
    for path in written:
        print(f"wrote {path}")
    for reason in skipped:
        print(f"skipped {reason}", file=sys.stderr)
    return 0

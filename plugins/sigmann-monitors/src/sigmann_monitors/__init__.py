"""Monitors of a run, as hooks (``register_hooks``): the progress bar, the metrics files, learning-rate schedules and
the stoppers.

The core runs without them (a core-only install prints one plain line per epoch); the README's main-job command
installs them. Other plugins that write or read a run's metrics files (``sigmann-plots``, ``sigmann-web``) import
:func:`record`, :func:`read_metrics`, :func:`read_history` and :func:`read_new` from here: the files' one format,
and one reader of them at any length (:mod:`sigmann_monitors.history`); and :func:`run_directories` and
:func:`run_label`, the runs a path names (:mod:`sigmann_monitors.runs`).
"""

from sigma_core import hookimpl

#: Rows of ``(name, "module:attr", description for sigma plugins, *aliases)``.
HOOKS = [
    ("progress", "sigmann_monitors.progress:ProgressHook", "a progress bar per epoch (unless --quiet)"),
    ("metrics", "sigmann_monitors.metrics:MetricsHook", "costs, scores and run values to metrics.csv and .jsonl"),
    ("stop", "sigmann_monitors.stoppers:StopTraining", "stops at an epoch", "stop_training"),
    ("early_stopping", "sigmann_monitors.stoppers:EarlyStopping", "stops when a value stops improving"),
    ("stop_on_non_finite", "sigmann_monitors.stoppers:StopOnNonFinite", "stops at a NaN/Inf", "nan_stopper"),
    ("staircase_schedule", "sigmann_monitors.schedules:StaircaseSchedule", "rate × gamma every n", "step_schedule"),
    ("exponential_schedule", "sigmann_monitors.schedules:ExponentialSchedule", "learning rate × gamma^t"),
    ("cosine_schedule", "sigmann_monitors.schedules:CosineSchedule", "cosine-annealed learning rate"),
    ("warm_up", "sigmann_monitors.schedules:WarmUp", "linear learning-rate warm-up", "warmup"),
]


@hookimpl
def register_hooks(register):
    for name, implementation, description, *aliases in HOOKS:
        register(name, implementation, aliases=aliases, description=description)


def __getattr__(name):  # the metrics files' format, without importing NumPy when only discovery runs
    if name in ("record", "MetricsHook"):
        from . import metrics

        return getattr(metrics, name)
    if name in ("read_metrics", "read_history", "read_new", "History"):
        from . import history

        return getattr(history, name)
    if name in ("run_directories", "run_label"):
        from . import runs

        return getattr(runs, name)
    raise AttributeError(f"module 'sigmann_monitors' has no attribute {name!r}")

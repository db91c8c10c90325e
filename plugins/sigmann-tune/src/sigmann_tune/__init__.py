"""``sigma tune``: hyperparameter search over a run file's ``[tune]`` section, with Optuna.

Discovery imports nothing heavy: Optuna, Ray and the training code load when
``sigma tune`` runs. The ``[tune]`` section is registered so that run files
holding one pass the core's validator (``sigma train`` trains the run as the
file sets it, and leaves the section be); :data:`SECTION` is its rule.
"""

from __future__ import annotations

from sigma_core import hookimpl

#: The rule the core holds a run file's ``[tune]`` table against: the settings; any other key is a search
#: dimension, checked by :func:`sigmann_tune.space.read_section` (so a misspelt setting is named as one).
SECTION = {
    "objective": "str", "direction": ("maximize", "minimize"), "trials": "int >= 1", "timeout": "number > 0",
    "sampler": ("tpe", "random", "grid"), "seed": "int >= 0", "pruner": ("median", "hyperband", "none"),
    "startup_trials": "int >= 0", "warmup_epochs": "int >= 0", "heartbeat": "int >= 1", ...: "any",
}


@hookimpl
def register_sections(register):
    register("tune", SECTION, description="what sigma tune searches: settings and search dimensions")


@hookimpl
def register_commands(cli):
    from .cli import add_parser  # argparse only

    add_parser(cli)

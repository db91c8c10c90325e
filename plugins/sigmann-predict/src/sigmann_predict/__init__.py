"""Applications of a trained network: ``sigma predict``, ``sigma eval``, ``sigma export`` and ``sigma summary``, and
safetensors files.

The core keeps what a run needs to save and reload a network (checkpoints, ``sigma_core.load``); what a user does
with it afterwards lives here. Building the parsers imports nothing but the core's option parents: each command's
module loads when it runs.
"""

from sigma_core import hookimpl

from . import evaluate, export, predict, summary

COMMANDS = (evaluate, predict, export, summary)


@hookimpl
def register_commands(cli):
    for command in COMMANDS:
        command.add_parser(cli).set_defaults(run=command.main)


@hookimpl
def register_exporters(register):
    register("safetensors", "sigmann_predict.safetensors_files:export_safetensors",
             description="parameters, run metadata, preprocessing")


@hookimpl
def register_loaders(register):
    register("safetensors", "sigmann_predict.safetensors_files:read_safetensors",
             description="a network exported with sigma export --format safetensors")

"""``sigma help`` and ``sigma config``, added to the ``sigma`` command through the ``register_commands`` hook.

Building the parser imports nothing but the core's option parents: :mod:`sigmann_help.show` loads when the
command runs.
"""

from __future__ import annotations

from sigma_core import hookimpl


@hookimpl
def register_commands(cli):
    from sigma_core import COMPONENT_KINDS, cli_options  # the sigma command's own (this function runs only there)

    parser = cli.add_parser(
        "help", parents=[cli_options.DEBUG], help="a component's arguments, types, defaults and documentation",
        description="Show a registered component's run-file arguments (types, defaults) and documentation, read "
                    "from its own declaration: sigma help layer dense, sigma help monitor metrics. Without NAME: "
                    "the components of KIND; without KIND: the kinds.")
    parser.add_argument("kind", nargs="?", help=f"one of {', '.join(COMPONENT_KINDS)}; or a name alone")
    parser.add_argument("name", nargs="?", help="a registered name or alias (see sigma plugins)")
    parser.set_defaults(run=run_help)
    config = cli.add_parser(
        "config", parents=[cli_options.HANDLER, cli_options.SET, cli_options.DEBUG],
        help="print a run file with every default filled in (TOML), as sigma train would train it",
        description="Print the run file with every component's default filled in, as TOML: the run `sigma train` "
                    "would train with the same options, ready to be saved and trained (sigma train --print-config).")
    config.add_argument("config", help="run file (TOML)")
    config.add_argument("--monitor", "--hook", dest="monitors", action="append", default=[],
                        metavar="NAME[:KEY=VALUE,...]", help="a hook sigma train would attach (repeatable)")
    config.set_defaults(run=run_config)


def __getattr__(name):  # config_toml, resolved_config (sigmann-mlflow, sigmann-testing), not imported at discovery
    if name == "config_toml":
        from sigmann_help.toml_config import config_toml

        return config_toml
    if name == "resolved_config":
        from sigmann_help.resolved import resolved_config

        return resolved_config
    raise AttributeError(f"module 'sigmann_help' has no attribute {name!r}")


def run_config(args) -> int:
    from sigmann_help.toml_config import run

    return run(args)


def run_help(args) -> int:
    from sigmann_help.show import run

    return run(args.kind, args.name)

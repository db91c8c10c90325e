"""``sigma help``, added to the ``sigma`` command through the ``register_commands`` hook.

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
    parser.add_argument("kind", nargs="?", help=f"one of {', '.join(COMPONENT_KINDS)}")
    parser.add_argument("name", nargs="?", help="a registered name or alias (see sigma plugins)")
    parser.set_defaults(run=run_help)


def run_help(args) -> int:
    from sigmann_help.show import run

    return run(args.kind, args.name)

"""The ``sigma`` command.

The core's commands register like any plugin's (``register_commands`` in :mod:`sigma_core.builtins`): each module
of :data:`COMMANDS` has ``add_parser(subparsers)``, which adds and returns its parser, and ``main``, from the parsed
arguments to the exit status. A plugin's command never replaces one of the core's. A
:class:`~sigma_core.errors.SigmaError` (a usage error too) is one ``error:`` line and exit status 2, or its
traceback with ``--debug``; any other exception is a bug and shows its traceback.
"""

import argparse
import contextlib
import logging
import os
import sys

from sigma_core import __version__
from sigma_core.errors import SigmaError, one_line
from sigma_core.plugins import components

from sigma_core.cli import options, plugins, train

#: The core's own commands (sigmann's ``register_commands``).
COMMANDS = (plugins, train)

log = logging.getLogger("sigma")


def main(argv: list[str] | None = None) -> int:
    """Run ``sigma`` with ``argv`` (default: the process arguments); return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # known before parsing: building the parser runs plugins, which can fail
    with _logging_to_stderr(debug, quiet="--quiet" in argv):
        try:
            args = build_parser().parse_args(argv)
            return args.run(args)
        except (SigmaError, KeyboardInterrupt) as error:  # Ctrl-C outside training, which stops cleanly (train.py)
            if debug:
                raise
            interrupted = isinstance(error, KeyboardInterrupt)
            print("interrupted" if interrupted else f"error: {one_line(error)}", file=sys.stderr)
            return 130 if interrupted else 2
        except BrokenPipeError:  # `sigma plugins | head`: the reader has gone, which is not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail again
            return 0


def build_parser() -> argparse.ArgumentParser:
    parser = options.Parser(prog="sigma", parents=[options.DEBUG],
                            description="Sigma: a plugin-based machine-learning framework.")
    parser.add_argument("--version", action="version", version=f"sigma {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    commands = sorted(components("command"), key=lambda c: c.distribution != "sigmann")  # the core's first: a
    adders = {command.implementation: command.distribution for command in commands}  # plugin may add to them
    built_in = {c.name for c in commands if c.distribution == "sigmann"}
    for register_commands, distribution in adders.items():  # each register_commands once, though it may add several
        cli = subparsers if distribution == "sigmann" else _PluginCommands(subparsers, built_in, distribution)
        register_commands(cli=cli)
    return parser


class _PluginCommands:
    """The sub-parsers as a plugin's ``register_commands`` sees them: a command named (or aliased) like a built-in
    one is left out with a warning, getting a parser nothing reaches (argparse would let it replace the built-in)."""

    def __init__(self, subparsers, built_in: set[str], distribution: str):
        self._subparsers, self._built_in, self._distribution = subparsers, built_in, distribution

    def add_parser(self, name, **kwargs):
        clash = next((n for n in (name, *kwargs.get("aliases", ())) if n in self._built_in), None)
        if clash is None:  # with --debug, which every command takes, where the plugin left it out
            parents = kwargs.pop("parents", [])
            parents = parents if options.DEBUG in parents else [*parents, options.DEBUG]
            return self._subparsers.add_parser(name, parents=parents, **kwargs)
        log.warning("command %r of %s is left out: it clashes with sigma's built-in %r; uninstall %s, or leave it "
                    "out with SIGMA_PLUGINS", clash, self._distribution, clash, self._distribution)
        return options.Parser(prog=f"sigma {name}")

    def __getattr__(self, attribute):  # choices, and whatever else argparse offers
        return getattr(self._subparsers, attribute)


@contextlib.contextmanager
def _logging_to_stderr(debug: bool, quiet: bool):
    """Show the ``sigma`` loggers on stderr (info: the handler chosen, a hook's reports) while a command runs, with
    ``--quiet`` no library's INFO line (MLflow's run links, on its own handler); undone afterwards, so that calling
    :func:`main` in-process (tests, notebooks) leaves logging as it was."""
    handler, level, on = logging.StreamHandler(sys.stderr), log.level, logging.Logger.isEnabledFor
    handler.setFormatter(logging.Formatter("sigma: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if debug else logging.INFO)
    if quiet:  # every logger's, those a library makes during the command too: a level set on one would not hold
        logging.Logger.isEnabledFor = lambda one, at: on(one, at) and (at > logging.INFO or one.name[:5] == "sigma")
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        logging.Logger.isEnabledFor = on


def register_commands(cli) -> None:
    """The core's commands, added to ``cli`` as a plugin adds its own."""
    for command in COMMANDS:
        command.add_parser(cli).set_defaults(run=command.main)

"""The ``sigma`` command.

Each subcommand module here (listed in :data:`SUBCOMMANDS`) has an
``add_parser(subparsers)`` that builds its parser and sets ``run`` to a function
from the parsed arguments to an exit status; plugins add commands the same way
through the ``register_commands`` hook (one named like a built-in command is
left out, with a warning naming its distribution: the other commands still
work). A :class:`~sigma_core.errors.SigmaError` is a problem the user can fix,
a usage error included: one ``error:`` line and exit status 2, or the
traceback with ``--debug``. Any other exception is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

from sigma_core import __version__
from sigma_core.errors import SigmaError, one_line
from sigma_core.plugins import components

from . import evaluate, export, help, options, plugins, predict, summary, train

SUBCOMMANDS = (plugins, help, train, summary, evaluate, predict, export)

log = logging.getLogger("sigma")


def main(argv: list[str] | None = None) -> int:
    """Run ``sigma`` with ``argv`` (default: the process arguments); return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # known before parsing: building the parser runs plugins, which can fail
    with _logging_to_stderr(debug):
        try:
            args = build_parser().parse_args(argv)
            return args.run(args)
        except SigmaError as exc:
            if debug:
                raise
            print(f"error: {one_line(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C outside training (which stops cleanly: see cli/train.py)
            if debug:
                raise
            print("interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `sigma plugins | head`: the reader has gone, which is not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail again
            return 0


def build_parser() -> argparse.ArgumentParser:
    parser = options.Parser(prog="sigma", parents=[options.DEBUG],
                            description="Sigma: a plugin-based machine-learning framework.")
    parser.add_argument("--version", action="version", version=f"sigma {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(subparsers)
    built_in, adders = set(subparsers.choices), []  # plugins' commands come after the built-in ones, never replace one
    for command in components("command"):
        clash = next((name for name in (command.name, *command.aliases) if name in built_in), None)
        if clash:
            log.warning("command %r of %s is left out: it clashes with sigma's built-in %r; uninstall %s, or leave it "
                        "out with SIGMA_PLUGINS", clash, command.distribution, clash, command.distribution)
        if command.implementation not in adders:  # one register_commands may add several commands
            adders.append(command.implementation)
    for register_commands in adders:
        register_commands(cli=_PluginCommands(subparsers, built_in))
    return parser


class _PluginCommands:
    """The sub-parsers as a plugin's ``register_commands`` sees them: a command named (or aliased) like a built-in
    one gets a parser of its own that nothing reaches, so it cannot replace the built-in (argparse would let it)."""

    def __init__(self, subparsers, built_in: set[str]):
        self._subparsers, self._built_in = subparsers, built_in

    def add_parser(self, name, **kwargs):
        if {name, *kwargs.get("aliases", ())} & self._built_in:  # warned about in build_parser
            return options.Parser(prog=f"sigma {name}")
        return self._subparsers.add_parser(name, **kwargs)

    def __getattr__(self, attribute):  # choices, and whatever else argparse offers
        return getattr(self._subparsers, attribute)


@contextlib.contextmanager
def _logging_to_stderr(debug: bool):
    """Show the ``sigma`` logger on stderr (info, e.g. the handler chosen) while a command runs.

    Undone afterwards, so that calling :func:`main` in-process (tests, notebooks) leaves logging as it was.
    """
    logger = logging.getLogger("sigma")
    handler, level = logging.StreamHandler(sys.stderr), logger.level
    handler.setFormatter(logging.Formatter("sigma: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)

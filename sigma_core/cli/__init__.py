"""The ``sigma`` command.

Each subcommand lives in its own module here with an ``add_parser(subparsers)``
function, listed in :data:`SUBCOMMANDS`; it builds its parser and sets ``run``
to a function taking the parsed arguments and returning an exit status. To add
a subcommand, write one such module and list it. Plugin distributions add
theirs the same way through the ``register_commands`` hook (``sigma bench``
comes from ``sigmann-bench``).

A :class:`~sigma_core.errors.SigmaError` is a problem the user can fix, so it
is printed as one ``error:`` line and the exit status is 2; ``--debug`` shows
the traceback instead. Any other exception is a bug and always shows its
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys

from sigma_core.errors import ComponentClashError, SigmaError

from . import evaluate, plugins, train


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
            print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Ctrl-C outside training (which stops cleanly: see cli/train.py)
            if debug:
                raise
            print("interrupted", file=sys.stderr)
            return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sigma", description="Sigma: a plugin-based machine-learning framework."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(subparsers)
    _add_plugin_commands(subparsers)
    return parser


def _add_plugin_commands(subparsers) -> None:
    """Let each plugin that registers commands add them, after (and never over) the built-in ones."""
    from sigma_core.plugins import components

    hooks = []
    for command in components("command"):
        clash = next((name for name in (command.name, *command.aliases) if name in subparsers.choices), None)
        if clash:
            raise ComponentClashError(f"command {clash!r} of {command.distribution} clashes with sigma's built-in "
                                      f"{clash!r}; uninstall {command.distribution}, or leave it out with SIGMA_PLUGINS")
        if command.target not in hooks:
            hooks.append(command.target)
    for hook in hooks:
        hook(cli=subparsers)


@contextlib.contextmanager
def _logging_to_stderr(debug: bool):
    """Show the ``sigma`` logger on stderr (info, e.g. the handler chosen) while a command runs.

    Undone afterwards, so calling :func:`main` in-process (tests, notebooks)
    leaves logging as it was.
    """
    logger = logging.getLogger("sigma")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sigma: %(message)s"))
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)


SUBCOMMANDS = (plugins, train, evaluate)

"""The ``sigma`` command.

Each subcommand lives in its own module here with an ``add_parser(subparsers)``
function, listed in :data:`SUBCOMMANDS`; it builds its parser and sets ``run``
to a function taking the parsed arguments and returning an exit status. To add
a subcommand, write one such module and list it.

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

from sigma_core.errors import SigmaError

from . import bench, evaluate, plugins, train


def main(argv: list[str] | None = None) -> int:
    """Run ``sigma`` with ``argv`` (default: the process arguments); return the exit status."""
    args = build_parser().parse_args(argv)
    with _logging_to_stderr(args.debug):
        try:
            return args.run(args)
        except SigmaError as exc:
            if args.debug:
                raise
            print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sigma", description="Sigma: a plugin-based machine-learning framework."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(subparsers)
    return parser


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


SUBCOMMANDS = (plugins, train, evaluate, bench)

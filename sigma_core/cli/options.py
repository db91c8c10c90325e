"""Options several ``sigma`` subcommands share, as argparse parent parsers (one definition each)."""

from __future__ import annotations

import argparse

#: ``--debug`` after the subcommand too (``sigma train run.toml --debug``); SUPPRESS keeps ``sigma --debug``'s value.
DEBUG = argparse.ArgumentParser(add_help=False)
DEBUG.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and debug logging")

#: The computation handler and its precision, for commands that compute.
HANDLER = argparse.ArgumentParser(add_help=False)
HANDLER.add_argument("--handler", help="computation handler (overrides SIGMA_HANDLER and the run file)")
HANDLER.add_argument("--dtype", choices=("float32", "float64"), help="override handler.dtype")

#: Machine-readable output.
JSON = argparse.ArgumentParser(add_help=False)
JSON.add_argument("--json", action="store_true", help="print JSON instead of text")

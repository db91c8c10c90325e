"""What the ``sigma`` commands' parsers share (plugins' too, as ``sigma_core.cli_options``): options several take,
as argparse parent parsers; the parser class, whose usage errors are one line; :func:`ranged`, the type of every
numeric option."""

import argparse

from sigma_core.errors import SigmaError

#: ``--debug`` after the subcommand too (``sigma train run.toml --debug``); SUPPRESS keeps ``sigma --debug``'s value.
DEBUG = argparse.ArgumentParser(add_help=False)
DEBUG.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and debug logging")

#: The computation handler and its precision, for commands that compute.
HANDLER = argparse.ArgumentParser(add_help=False)
HANDLER.add_argument("--handler", help="override handler.name (and SIGMA_HANDLER)")
HANDLER.add_argument("--dtype", choices=("float32", "float64"), help="override handler.dtype")

#: Run-file overrides, for commands that read a run file.
SET = argparse.ArgumentParser(add_help=False)
SET.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                 help="override a run-file key, e.g. --set training.epochs=3 (repeatable)")


def run_overrides(args) -> list[str]:
    """The run-file overrides a command's options make, in the order they apply (the last word wins):
    ``SIGMA_HANDLER``, each ``--set``, then ``--handler`` and ``--dtype``. Each lands in the run's config like any
    ``--set``, so the checkpoint, ``sigma config`` and every worker see the handler the run really asked for."""
    from sigma_core.compute.backend import handler_from_environment

    environment = handler_from_environment()
    flags = (("name", getattr(args, "handler", None)), ("dtype", getattr(args, "dtype", None)))
    return [*([f"handler.name={environment}"] if environment else []), *getattr(args, "overrides", ()),
            *(f"handler.{key}={value}" for key, value in flags if value)]


#: Machine-readable output.
JSON = argparse.ArgumentParser(add_help=False)
JSON.add_argument("--json", action="store_true", help="print JSON instead of text")


class UsageError(SigmaError):
    """A command line argparse refuses (an unknown option, a missing argument, a value out of range)."""


class Parser(argparse.ArgumentParser):
    """The ``sigma`` command's parsers (sub-commands' too, plugins' included): a usage error is one line,
    ``error: sigma predict: argument --top: expected an integer >= 1, got '0'; see sigma predict --help``,
    and exit status 2, as every other error is."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}; see {self.prog} --help")


def ranged(rule: str):
    """An argparse ``type`` for a numeric option that follows ``rule``, in the run file's rule language
    (:mod:`sigma_core.config`): ``type=ranged("int >= 1")``, ``ranged("number in [0, 1)")``."""
    from sigma_core.config import accepts, describe_rule

    kind = rule.partition(" ")[0]

    def parse(text: str):
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            value = text
        if not accepts(rule, value):
            raise argparse.ArgumentTypeError(f"expected {describe_rule(rule)}, got {text!r}")
        return value

    parse.__name__ = rule  # what argparse's help and messages call the type
    return parse

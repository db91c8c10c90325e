"""Writes reference/cli.md, every ``sigma`` command with its options, from the argparse parser ``sigma`` itself builds.

The parser is built as ``sigma`` builds it, plugins' commands included (``register_commands``), when the site is
built: the page is argparse's own help, so an option added to a command is on the page the next time the site is
built. The installed distributions decide which plugin commands appear; CI builds with every distribution of this
repository (requirements-dev.txt).
"""

from __future__ import annotations

import argparse
import os

import mkdocs_gen_files

from sigma_core import components
from sigma_core.cli import build_parser

#: argparse wraps help to the terminal's width; a fixed width gives the same page on every machine.
os.environ["COLUMNS"] = "110"


def subcommands(parser: argparse.ArgumentParser, prefix: str):
    """(command line, its parser, its one-line help) of every subcommand, depth first: ``sigma plugin new`` too."""
    for action in parser._actions:  # argparse keeps its sub-parsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.prog.endswith(f" {name}"):  # an alias's entry repeats its command's parser
                    yield f"{prefix} {name}", sub, helps.get(name, "")
                    yield from subcommands(sub, f"{prefix} {name}")


def render() -> str:
    parser = build_parser()
    origin = {c.name: c.distribution for c in components("command")}
    lines = ["# The `sigma` command", "",
             "Every command and its options, as `sigma COMMAND --help` prints them; generated from the parser "
             "`sigma` builds when this site is built, with every distribution of this repository installed. "
             "Commands other distributions add appear once they are installed (`sigma plugins` lists them as "
             "components of kind `command`).", "", "```text", parser.format_help().rstrip(), "```"]
    seen = set()
    for command, sub, summary in subcommands(parser, "sigma"):
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        name = command.split()[1]
        lines += ["", f"## `{command}`", ""]
        lines += [f"{summary[:1].upper()}{summary[1:]}." if summary else "",
                  f"From [`{origin[name]}`](../distributions/{origin[name]}.md).", ""] if name in origin else []
        lines += ["```text", sub.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


with mkdocs_gen_files.open("reference/cli.md", "w") as page:
    page.write(render())

"""``sigma help KIND NAME``: a component's own declarations (signature, rules, docstring), shown."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest

from sigma_core import cli_main, components, load_component
from sigmann_help.markup import plain


def shown(capsys, *arguments) -> tuple[int, str, str]:
    status = cli_main(list(arguments))
    out, err = capsys.readouterr()
    return status, out, err


def rows(out: str) -> list[tuple[str, ...]]:
    """The argument table of ``sigma help``'s output: (name, type, default) per argument, columns two spaces apart."""
    table = out.partition("\nArguments (")[2].partition("\n\n")[0].splitlines()[1:]
    return [tuple(re.split(r"\s{2,}", line.strip())) for line in table]


def test_help_is_a_command_of_this_distribution():
    [command] = [c for c in components("command") if c.name == "help"]
    assert command.distribution == "sigmann-help"


def test_building_the_parser_imports_none_of_the_commands_code():
    code = ("import sys; from sigma_core.cli import build_parser; build_parser(); "
            "print('sigmann_help.show' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_help_shows_a_layers_arguments_types_defaults_and_docstring(capsys):
    status, out, _ = shown(capsys, "help", "layer", "dense")
    assert status == 0
    assert out.startswith("layer dense (aliases: fullyconnected, fc), from sigmann ")
    docstring = plain(inspect.cleandoc(load_component("layer", "dense").__doc__))
    assert f"\n{docstring}\n" in out  # its own docstring, its markup left out
    assert "\nArguments ([[network.layers]]):\n" in out
    assert rows(out) == [("size", "an integer >= 1", "required"), ("activation", "anything", 'default "none"'),
                         ("bias", "true or false", "default true"),
                         ("time_distributed", "true or false", "default false")]
    assert out.endswith("The table's other keys: type, name, inputs.\n")


def test_help_shows_rules_from_conventions_and_argument_rules(capsys):
    status, out, _ = shown(capsys, "help", "optimiser", "adam")
    assert status == 0 and "\nAdam (Kingma & Ba, 2015" in out
    assert ("beta1", "a finite number in [0, 1)", "default 0.9") in rows(out)  # config.CONVENTIONS
    assert ("freeze", "a string or an array of strings", "default []") in rows(out)
    status, out, _ = shown(capsys, "help", "extractor", "synthetic")
    assert status == 0 and ("n", "an integer >= 1", "required") in rows(out)  # its argument_rules
    assert "The table's other keys: extractor, preprocess, one_hot" in out


def test_help_takes_monitor_for_hook_and_lists_a_kind(capsys):
    assert shown(capsys, "help", "monitor", "metrics") == shown(capsys, "help", "hook", "metrics")
    status, out, _ = shown(capsys, "help", "monitor", "metrics")
    assert status == 0 and ("every", "an integer >= 0", "default 10") in rows(out)
    assert ("directory", "a string", "default unset") in rows(out)
    status, out, _ = shown(capsys, "help", "layer")
    assert status == 0 and any(line.split()[0] == "dense" and "activation" in line for line in out.splitlines())
    status, out, _ = shown(capsys, "help")
    assert status == 0 and out.startswith("kinds: handler, layer, activation, optimiser")


def test_a_command_points_to_its_own_help(capsys):
    status, out, _ = shown(capsys, "help", "command", "help")
    assert status == 0 and out.startswith("command help, from sigmann-help ")
    assert out.endswith("\nIts arguments: sigma help --help\n")


@pytest.mark.parametrize("arguments, message", [
    (("layre", "dense"), "error: unknown kind 'layre'; kinds are handler, layer, activation, optimiser, "),
    (("layer", "dens"), "error: unknown layer 'dens' (did you mean 'dense'? available: add, "),  # plugins add more
    (("adamm",), "error: no kind or component is named 'adamm'; kinds are handler, layer, activation, optimiser, "),
])
def test_an_unknown_kind_or_name_is_one_line_listing_what_exists(capsys, arguments, message):
    status, out, err = shown(capsys, "help", *arguments)
    assert (status, out) == (2, "")
    assert err.startswith(message) and err.count("\n") == 1


def test_a_component_named_alone_is_shown_whatever_its_kind(capsys):
    """``sigma help adam``: the user need not know Adam is an optimiser; a name of several kinds shows each."""
    _, optimiser, _ = shown(capsys, "help", "optimiser", "adam")
    status, out, err = shown(capsys, "help", "adam")  # the optimiser, then its update rule
    assert (status, err) == (0, "") and out.startswith(optimiser + "\nupdate_rule adam, from sigmann ")
    status, out, _ = shown(capsys, "help", "relu")
    assert status == 0 and out.startswith("activation relu ") and "\n\nop relu, from sigmann " in out


def test_help_shows_docstrings_without_their_markup(capsys):
    """Docstrings are written with RST inline markup (``x``, :class:`y`); a terminal shows the words alone."""
    assert plain("a ``dense`` :class:`~sigma_core.Layer`, :func:`sigma_core.build`, :ref:`the guide <guide>`") == \
        "a dense Layer, sigma_core.build, the guide"
    documented = [c for c in components("layer") + components("hook") if "``" in (inspect.getdoc(c.load()) or "")]
    assert documented, "no component's docstring has markup to check against"
    for component in documented:
        status, out, _ = shown(capsys, "help", component.kind, component.name)
        assert status == 0 and "``" not in out and not re.search(r":\w+:`", out), out

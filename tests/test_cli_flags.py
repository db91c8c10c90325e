"""Flags every command shares: ``--debug`` (tracebacks), taken by every command, a plugin's too; ``--quiet``,
which silences INFO lines, a library's as well as Sigma's (MLflow logs its run links at INFO on its own handler)."""

from __future__ import annotations

import argparse
import io
import logging

import pytest

from sigma_core.cli import build_parser, main
from sigma_core.errors import SigmaError

ENABLED = logging.Logger.isEnabledFor


def test_every_command_takes_debug_a_plugins_too():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"plot", "dashboard", "bench", "tune", "train"} <= set(commands)
    assert [name for name, command in commands.items() if "--debug" not in command._option_string_actions] == []


def test_debug_after_a_plugins_command_shows_the_traceback(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2  # no metrics there: one line
    assert capsys.readouterr().err.startswith("error: ")
    with pytest.raises(SigmaError):  # --debug: the exception itself, so its traceback shows
        main(["plot", str(tmp_path), "--debug"])


@pytest.fixture
def library_log():
    """A library's logger as MLflow sets up its own: a handler of its own, level INFO, not propagated."""
    library, stream = logging.getLogger("a_library"), io.StringIO()
    handler = logging.StreamHandler(stream)
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    library.propagate = False
    yield library, stream
    library.removeHandler(handler)


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_silences_a_librarys_info_lines_not_its_warnings(sigma_run_file, library_log, monkeypatch, quiet):
    import sigma_core.run

    library, stream = library_log
    real = sigma_core.run.build_run

    def build_run(*args, **kwargs):
        library.info("View run at http://127.0.0.1:5000/#/experiments/0/runs/1")
        library.warning("a warning still shows")
        return real(*args, **kwargs)

    monkeypatch.setattr(sigma_core.run, "build_run", build_run)
    assert main(["train", str(sigma_run_file()), *(["--quiet"] if quiet else [])]) == 0
    shown = stream.getvalue().splitlines()
    assert shown == (["a warning still shows"] if quiet else ["View run at http://127.0.0.1:5000/#/experiments/0/runs/1",
                                                             "a warning still shows"])
    assert logging.Logger.isEnabledFor is ENABLED  # as it was before the command


def test_quiet_keeps_sigmas_own_info_lines(sigma_run_file, caplog):
    """A run file's hooks report at INFO on the sigma loggers (sigmann-text's bits per character): they still show."""
    with caplog.at_level(logging.INFO, logger="sigma"):
        assert main(["train", str(sigma_run_file()), "--quiet", "--monitor", "accuracy_reporter"]) == 0
    assert any(record.name.startswith("sigma") and record.levelno == logging.INFO for record in caplog.records)

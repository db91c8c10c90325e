"""Choosing the debug handler: every spelling that works, and every bad one as one error line with exit 2."""

from pathlib import Path

import pytest

from sigma_core import cli, create_handler

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits.toml"


@pytest.mark.parametrize("name, wrapped", [("debug:numpy", "numpy"), ("debug:cpu", "cpu"), ("debug:auto", "cpu"),
                                            ("debug", "cpu")])
def test_debug_wraps_the_named_handler_keeping_its_name_and_kernels(name, wrapped):
    handler = create_handler(name, dtype="float64", seed=3)
    plain = create_handler(wrapped, dtype="float64", seed=3)
    assert handler.name == wrapped and type(handler.kernels) is type(plain.kernels) and handler.dtype == "float64"
    assert repr(handler).endswith(f" debug:{wrapped} float64>")
    assert handler.uniform((4,)).to_numpy().tolist() == plain.uniform((4,)).to_numpy().tolist()  # same generator


@pytest.mark.parametrize("arguments, message", [
    (["--handler", "debug:quantum"], "error: handler 'debug:quantum': the part after ':' must be a device number, "
                                     "as in 'debug:1'"),
    (["--monitor", "debug:limit=-1"], "error: --monitor[1].limit: expected a number > 0 or null, got -1"),
    (["--monitor", "debug:trow=false"], "error: unknown key --monitor[1].trow for hook 'debug'"),
    (["--handler", "numpy", "--monitor", "debug"], "error: hook 'debug': the run's handler is 'numpy', which checks "
                                                   "nothing; choose --handler debug:numpy"),
])
def test_a_bad_spelling_is_one_error_line_and_exit_2(arguments, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", str(DIGITS), "--set", "training.epochs=1", *arguments]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), errors

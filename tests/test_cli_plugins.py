"""``sigma plugins``: the table, ``--json``, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sigma_core import cli
from sigma_core.errors import PluginError

REQUIRED_KEYS = {"kind", "name", "aliases", "distribution", "version", "available", "reason"}


def run_sigma(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "sigma_core", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_json_lists_numpy_as_available_with_the_required_keys():
    result = run_sigma("plugins", "--json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    assert all(REQUIRED_KEYS <= entry.keys() for entry in entries)
    [numpy_entry] = [e for e in entries if (e["kind"], e["name"]) == ("handler", "numpy")]
    assert numpy_entry["available"] is True
    assert numpy_entry["distribution"] == "sigmann"


def test_no_available_component_gives_a_reason_it_could_not_run():
    """A check's reason is why a component cannot run; an available one's may only describe it (a GPU's devices)."""
    entries = json.loads(run_sigma("plugins", "--json").stdout)
    misleading = [(e["kind"], e["name"], e["reason"]) for e in entries if e["kind"] != "plugin-failure"
                  and e["available"] and any(word in e["reason"] for word in ("not installed", "cannot", "no "))]
    assert misleading == []


def test_json_shows_the_broken_plugin_and_the_good_one(good_and_broken):
    result = run_sigma("plugins", "--json", env=good_and_broken.subprocess_env())
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    assert {
        "kind": "plugin-failure",
        "name": "broken",
        "aliases": [],
        "distribution": "broken-plugin",
        "version": "0.1",
        "available": False,
        "reason": "RuntimeError: broken on purpose",
    } in entries
    swish = next(e for e in entries if e["name"] == "fake_swish")
    assert (swish["kind"], swish["aliases"], swish["distribution"]) == ("activation", ["fake_silu"], "good-plugin")


def test_table_shows_components_availability_and_failures(good_and_broken):
    result = run_sigma("plugins", env=good_and_broken.subprocess_env())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["KIND", "NAME", "ALIASES", "DISTRIBUTION", "VERSION", "STATUS"]
    assert any(line.split() == ["handler", "numpy", "sigmann", line.split()[3], "available"] for line in lines)
    assert any(line.split() == ["activation", "fake_swish", "fake_silu", "good-plugin", "0.1", "available"] for line in lines)
    assert "  broken (broken-plugin 0.1): RuntimeError: broken on purpose" in lines


def test_table_gives_the_reason_a_component_is_unavailable(fake_site):
    fake_site.add(
        "fake-cuda",
        entry_points={"cuda": "fake_cuda_mod"},
        modules={
            "fake_cuda_mod": """
                from sigma_core.hookspecs import hookimpl

                @hookimpl
                def register_handlers(register):
                    register("fakegpu", "fake_cuda_mod:Nothing", rank=100, check=lambda: (False, "no CUDA device"))
            """
        },
    )
    result = run_sigma("plugins", env=fake_site.subprocess_env())
    [cuda_line] = [line for line in result.stdout.splitlines() if line.split()[:2] == ["handler", "fakegpu"]]
    assert cuda_line.split()[2:] == ["fake-cuda", "0.1", "unavailable", "—", "no", "CUDA", "device"]


def test_strict_plugin_failure_is_one_error_line_and_exit_status_2(good_and_broken):
    result = run_sigma("plugins", env=good_and_broken.subprocess_env(SIGMA_STRICT_PLUGINS="1"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "error: plugin 'broken' (broken-plugin 0.1) failed to load: RuntimeError: broken on purpose\n"


def test_debug_reraises_sigma_errors(good_and_broken, monkeypatch):
    monkeypatch.setenv("SIGMA_STRICT_PLUGINS", "1")
    assert cli.main(["plugins"]) == 2
    with pytest.raises(PluginError):
        cli.main(["--debug", "plugins"])


def test_a_subcommand_is_required(capsys):
    assert cli.main([]) == 2
    assert capsys.readouterr().err == ("error: sigma: the following arguments are required: command; "
                                       "see sigma --help\n")


@pytest.mark.parametrize("argv, message", [
    (["predict", "x.ckpt", "x.npy", "--top", "0"], "sigma predict: argument --top: expected an integer >= 1, got '0'"),
    (["predict", "x.ckpt", "x.npy", "--top", "-3"], "sigma predict: argument --top: expected an integer >= 1, got '-3'"),
    (["predict", "x.ckpt", "x.npy", "--batch-size", "0"],
     "sigma predict: argument --batch-size: expected an integer >= 1, got '0'"),
    (["predict", "x.ckpt", "x.npy", "--batch-size", "1e3"],
     "sigma predict: argument --batch-size: expected an integer >= 1, got '1e3'"),
    (["sample", "x.ckpt", "--length", "-1"], "sigma sample: argument --length: expected an integer >= 0, got '-1'"),
    (["sample", "x.ckpt", "--temperature", "inf"],
     "sigma sample: argument --temperature: expected a finite number >= 0, got 'inf'"),
    (["dashboard", "runs/x", "--port", "65536"],
     "sigma dashboard: argument --port: expected an integer in [0, 65535], got '65536'"),
    (["train", "run.toml", "--no-such-option"], "sigma: unrecognized arguments: --no-such-option"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(capsys, argv, message):
    """Numeric options are range-checked before anything runs; every usage error is one line."""
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {message}; see {message.split(':')[0]} --help"]


# -- commands added by plugins (register_commands) ------------------------------------------------

HELLO_PLUGIN = """
    from sigma_core.hookspecs import hookimpl

    def hello(args):
        print(f"hello, {args.who}")
        return 3

    @hookimpl
    def register_commands(cli):
        parser = cli.add_parser("hello", aliases=["hi"], help="greets someone")
        parser.add_argument("who")
        parser.set_defaults(run=hello)
"""


def command_plugin(fake_site, distribution: str, body: str) -> None:
    module = distribution.replace("-", "_") + "_mod"
    fake_site.add(distribution, entry_points={"cmd": module}, modules={module: body})


def test_a_plugin_command_runs_and_is_listed_with_its_distribution(fake_site, capsys):
    command_plugin(fake_site, "hello-plugin", HELLO_PLUGIN)
    assert cli.main(["hi", "world"]) == 3
    assert capsys.readouterr().out == "hello, world\n"
    assert cli.main(["plugins", "--json"]) == 0
    [hello] = [e for e in json.loads(capsys.readouterr().out) if e["kind"] == "command" and e["name"] == "hello"]
    assert (hello["aliases"], hello["distribution"], hello["description"]) == (["hi"], "hello-plugin", "greets someone")


def test_a_plugin_command_named_like_a_built_in_is_left_out_with_one_line_naming_the_distribution(fake_site, capsys):
    command_plugin(fake_site, "shadow-plugin", """
        from sigma_core.hookspecs import hookimpl

        @hookimpl
        def register_commands(cli):
            cli.add_parser("train").set_defaults(run=lambda args: 0)
            cli.add_parser("shadow", aliases=["plugins"]).set_defaults(run=lambda args: 0)  # an alias clashes too
            cli.add_parser("fine").set_defaults(run=lambda args: 5)
    """)
    assert cli.main(["fine"]) == 5  # its other command works, and so does every built-in one
    err = capsys.readouterr().err
    assert sorted(line for line in err.splitlines() if "shadow-plugin" in line) == [
        f"sigma: command {name!r} of shadow-plugin is left out: it clashes with sigma's built-in {name!r}; "
        "uninstall shadow-plugin, or leave it out with SIGMA_PLUGINS" for name in ("plugins", "train")]
    assert cli.main(["train"]) == 2  # the built-in, which needs a run file (the plugin's would return 0)
    assert "required: config" in capsys.readouterr().err
    assert cli.main(["shadow"]) == 2  # left out with its clashing alias


def test_a_register_commands_hook_that_raises_is_reported_like_any_plugin_failure(fake_site, capsys):
    command_plugin(fake_site, "hello-plugin", HELLO_PLUGIN)
    command_plugin(fake_site, "faulty-plugin", """
        from sigma_core.hookspecs import hookimpl

        @hookimpl
        def register_commands(cli):
            raise ValueError("no parser today")
    """)
    assert cli.main(["plugins", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    [failure] = [e for e in entries if e["kind"] == "plugin-failure"]
    assert (failure["distribution"], failure["reason"]) == ("faulty-plugin", "ValueError: no parser today")
    assert cli.main(["hello", "you"]) == 3  # the other plugin's command still works


def test_a_closed_pipe_ends_sigma_plugins_quietly():
    """``sigma plugins | head -1`` must not end in a BrokenPipeError traceback."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "sigma_core", "plugins"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    child.stdout.close()  # the reader leaves before sigma has written anything
    _, err = child.communicate(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert child.returncode == 0

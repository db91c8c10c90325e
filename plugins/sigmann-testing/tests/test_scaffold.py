"""``sigma plugin new KIND NAME`` (this kit's command): the distribution it writes installs, passes its own tests
unchanged, and works."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sigma_core.cli import main
from sigmann_testing import available_handlers
from sigmann_testing.scaffold import KINDS

OTHER_KINDS = [kind for kind in KINDS if kind not in ("layer", "op")]
TESTS = 10  # the other kinds' generated tests: activation 2, hook 1, command 2, extractor 2, initialiser 1, optimiser 2


def install(tmp_path, *plugins):
    """pip install the plugins (no dependencies: sigmann is this venv's) into tmp_path/site; the environment
    that sees them, as if installed: their dist-info's entry points are what Sigma discovers."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(tmp_path / "site"), *map(str, plugins)], check=True, capture_output=True)
    return {**os.environ, "PYTHONPATH": str(tmp_path / "site")}


def run(argv, cwd, env):
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def run_file(handler, *layers) -> str:
    """A run file: 64 synthetic records of 5 features in 3 classes, through ``layers`` (tables) between the input
    and a dense softmax output, 3 epochs on ``handler``."""
    tables = [{"type": "input", "shape": [5]}, *layers, {"type": "dense", "size": 3}, {"type": "softmax_ce"}]
    return f"""name = "scaffolded"
[handler]
name = "{handler}"
[data]
extractor = "synthetic"
n = 64
shape = 5
classes = 3
[training]
batch_size = 8
epochs = 3
""" + "".join("[[network.layers]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in table.items())
              for table in tables)


@pytest.mark.slow
def test_a_new_layer_plugin_installs_passes_its_tests_and_trains(tmp_path, capsys):
    assert main(["plugin", "new", "layer", "demo", "--directory", str(tmp_path)]) == 0
    plugin = tmp_path / "sigmann-demo"
    assert capsys.readouterr().out.splitlines()[0] == str(plugin)
    assert sorted(p.relative_to(plugin).as_posix() for p in plugin.rglob("*") if p.is_file()) == [
        "README.md", "pyproject.toml", "src/sigmann_demo/__init__.py", "tests/test_demo.py"]
    assert 'demo = "sigmann_demo"' in (plugin / "pyproject.toml").read_text()
    assert 'test = ["sigmann-testing"]' in (plugin / "pyproject.toml").read_text()  # the kit its tests use, and pytest
    assert 'check_layer("demo"' in (plugin / "tests" / "test_demo.py").read_text()
    env = install(tmp_path, plugin)
    tests = run(["-m", "pytest", "-q", "-p", "no:cacheprovider"], plugin, env)
    assert tests.returncode == 0 and "2 passed" in tests.stdout, tests.stdout + tests.stderr
    (tmp_path / "run.toml").write_text(run_file("numpy", {"type": "demo", "size": 8}))
    trained = run(["-m", "sigma_core", "train", "run.toml", "--quiet", "--out", "result.json"], tmp_path, env)
    assert trained.returncode == 0, trained.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["epochs"] == 3 and result["parameters"] == 5 * 8 + 8 + 8 * 3 + 3
    assert result["history"][-1]["cost"] < result["history"][0]["cost"]
    untrained = run(["-m", "sigma_core", "train", "run.toml", "--quiet"], tmp_path, {**env, "PYTHONPATH": ""})
    assert untrained.returncode == 2 and "unknown layer 'demo'" in untrained.stderr.splitlines()[-1]


@pytest.mark.slow
def test_every_other_kind_installs_and_passes_its_tests(tmp_path, capsys):
    plugins = []
    for kind in OTHER_KINDS:
        assert main(["plugin", "new", kind, f"my_{kind}", "--directory", str(tmp_path)]) == 0
        plugins.append(tmp_path / f"sigmann-my-{kind}")
    env = install(tmp_path, *plugins)
    tests = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", *(str(p / "tests") for p in plugins)], tmp_path, env)
    assert tests.returncode == 0 and f"{TESTS} passed" in tests.stdout, tests.stdout + tests.stderr
    listed = run(["-m", "sigma_core", "plugins", "--json"], tmp_path, env)
    names = {component["name"] for component in json.loads(listed.stdout)}
    assert {f"my_{kind}" for kind in OTHER_KINDS} <= names


def test_bad_requests_are_one_line_and_status_2(tmp_path, capsys):
    (tmp_path / "sigmann-taken").mkdir()
    cases = {("layr", "demo"): "error: unknown plugin kind 'layr'; sigma plugin new writes: "
                               "layer, activation, hook, command, extractor, initialiser, optimiser, op",
             ("layer", "Demo"): "error: plugin name 'Demo': use lowercase letters, digits and _, starting with a letter "
                                "(it names the component and the Python module), and not a Python keyword",
             ("layer", "class"): "error: plugin name 'class': use lowercase letters, digits and _, starting with a "
                                 "letter (it names the component and the Python module), and not a Python keyword",
             ("layer", "dense"): "error: layer 'dense' exists already (from sigmann); choose another name",
             ("op", "lstm_sequence"): "error: op 'lstm_sequence' exists already (from sigmann-recurrent); choose "
                                      "another name",
             ("op", "dense"): "error: op 'dense' exists already (from sigmann); choose another name",
             ("op", "maxout"): "error: layer 'maxout' exists already (from sigmann-maxout); choose another name",
             ("command", "train"): "error: command 'train' is one of sigma's own commands, which a plugin cannot "
                                   "replace; choose another name",
             ("layer", "taken"): f"error: {tmp_path / 'sigmann-taken'} already exists; sigma plugin new never "
                                 "overwrites: remove it or choose another name"}
    for (kind, name), message in cases.items():
        assert main(["plugin", "new", kind, name, "--directory", str(tmp_path)]) == 2
        assert capsys.readouterr().err.splitlines() == [message]
    assert main(["plugin", "new", "layer", "demo", "--cpu", "--directory", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: --cpu writes an op's kernel for the cpu handler; a layer "
                                                    "has none"]
    assert [p.name for p in tmp_path.iterdir()] == ["sigmann-taken"] and not any((tmp_path / "sigmann-taken").iterdir())


@pytest.mark.slow
def test_a_new_op_plugin_with_cpu_kernels_installs_passes_its_tests_and_runs_them_on_cpu(tmp_path, capsys):
    assert main(["plugin", "new", "op", "gain_tanh", "--cpu", "--directory", str(tmp_path)]) == 0
    plugin = tmp_path / "sigmann-gain-tanh"
    assert main(["plugin", "new", "op", "second", "--cpu", "--into", str(plugin)]) == 0  # an op beside it
    assert sorted(p.relative_to(plugin).as_posix() for p in plugin.rglob("*") if p.is_file()) == [
        "README.md", "pyproject.toml", "src/sigmann_gain_tanh/__init__.py", "src/sigmann_gain_tanh/cpu.py",
        "src/sigmann_gain_tanh/second.py", "src/sigmann_gain_tanh/second_cpu.py", "tests/test_gain_tanh.py",
        "tests/test_second.py"]
    package = plugin / "src" / "sigmann_gain_tanh"
    assert 'kernels={"cpu": "sigmann_gain_tanh.cpu:NumbaGainTanh"},' in (package / "__init__.py").read_text()
    assert 'kernels={"cpu": "sigmann_gain_tanh.second_cpu:NumbaSecond"},' in (package / "second.py").read_text()
    env = install(tmp_path, plugin)
    handlers = available_handlers()
    assert "cpu" in handlers  # so the generated tests run the compiled kernels too
    tests = run(["-m", "pytest", "-q", "-p", "no:cacheprovider"], plugin, env)
    # per op: the conformance kit on each handler, its values, its shape error, check_layer, a run
    assert tests.returncode == 0 and f"{2 * (len(handlers) + 4)} passed" in tests.stdout, tests.stdout + tests.stderr
    (tmp_path / "run.toml").write_text(run_file("cpu", {"type": "dense", "size": 8}, {"type": "gain_tanh"}))
    trained = run(["-m", "sigma_core", "train", "run.toml", "--quiet", "--out", "result.json"], tmp_path, env)
    assert trained.returncode == 0, trained.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["parameters"] == 5 * 8 + 8 + 8 + 8 * 3 + 3  # dense, gain, dense
    assert result["history"][-1]["cost"] < result["history"][0]["cost"]
    ran = run(["-c", "import numpy, sigmann_gain_tanh.cpu as cpu; from sigma_core import create_handler; "
               "h = create_handler('cpu', dtype='float64'); "
               "h.op('gain_tanh', h.asarray(numpy.ones((2, 3))), h.asarray(numpy.ones(3))); "
               "print(len(cpu.ACTIVATE[0].signatures))"], tmp_path, env)
    assert ran.stdout == "1\n", ran.stderr  # the cpu handler ran the compiled loop, not the portable rule
    explained = run(["-m", "sigma_core", "explain", "run.toml"], tmp_path, env)
    kernels = [line.split()[0] for line in explained.stdout.splitlines()[2:-1]]
    assert "gain_tanh" in kernels and "gain_tanh.backward" in kernels, explained.stdout + explained.stderr


def test_an_op_without_cpu_has_no_kernel_module(tmp_path, capsys):
    assert main(["plugin", "new", "op", "plain", "--directory", str(tmp_path)]) == 0
    package = tmp_path / "sigmann-plain" / "src" / "sigmann_plain"
    assert [p.name for p in package.iterdir()] == ["__init__.py"]
    assert 'register("plain", Plain,\n             description=' in (package / "__init__.py").read_text()


@pytest.mark.slow
def test_into_adds_components_to_a_distribution_that_installs_and_passes_every_test(tmp_path, capsys):
    assert main(["plugin", "new", "layer", "demo", "--directory", str(tmp_path)]) == 0
    plugin = tmp_path / "sigmann-demo"
    before = {p: p.read_text() for p in plugin.rglob("*") if p.is_file() and p.name != "pyproject.toml"}
    capsys.readouterr()
    for kind, name in (("layer", "second"), ("activation", "fancy")):  # a second layer: its own register_layers
        assert main(["plugin", "new", kind, name, "--into", str(plugin)]) == 0
    assert capsys.readouterr().out.splitlines()[-4:] == [
        f"{plugin}/src/sigmann_demo/fancy.py", f"{plugin}/tests/test_fancy.py", f"{plugin}/pyproject.toml",
        f"reinstall it (pip install -e '{plugin}[test]') so that the new entry point 'fancy' is seen"]
    assert {p: p.read_text() for p in before} == before  # the files it had are as they were
    assert ('demo = "sigmann_demo"\nsecond = "sigmann_demo.second"\nfancy = "sigmann_demo.fancy"\n'
            in (plugin / "pyproject.toml").read_text())
    env = install(tmp_path, plugin)
    tests = run(["-m", "pytest", "-q", "-p", "no:cacheprovider"], plugin, env)
    assert tests.returncode == 0 and "6 passed" in tests.stdout, tests.stdout + tests.stderr
    listed = run(["-m", "sigma_core", "plugins", "--json"], tmp_path, env)
    mine = {(c["kind"], c["name"]) for c in json.loads(listed.stdout) if c.get("distribution") == "sigmann-demo"}
    assert mine == {("layer", "demo"), ("layer", "second"), ("activation", "fancy")}


def test_into_refuses_what_it_would_overwrite_or_cannot_place_in_one_line(tmp_path, capsys):
    assert main(["plugin", "new", "layer", "demo", "--directory", str(tmp_path)]) == 0
    plugin = tmp_path / "sigmann-demo"
    (plugin / "tests" / "test_taken.py").write_text("")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "pyproject.toml").write_text('[project]\nname = "bare"\nversion = "1"\n')
    before = {p: p.read_text() for p in plugin.rglob("*") if p.is_file()}
    capsys.readouterr()
    cases = {("demo", plugin): f"--into {plugin}: entry point 'demo', {plugin}/tests/test_demo.py exist already; "
                               "sigma plugin new never overwrites: choose another name",
             ("taken", plugin): f"--into {plugin}: {plugin}/tests/test_taken.py exists already; sigma plugin new "
                                "never overwrites: choose another name",
             ("other", tmp_path / "none"): f"--into {tmp_path / 'none'}: cannot read {tmp_path / 'none'}/pyproject.toml: "
                                           "No such file or directory",
             ("other", tmp_path / "bare"): f"--into {tmp_path / 'bare'}: {tmp_path / 'bare'}/pyproject.toml has no "
                                           "[project.entry-points.sigma] table (sigma plugin new writes one)"}
    for (name, folder), message in cases.items():
        assert main(["plugin", "new", "activation", name, "--into", str(folder)]) == 2
        assert capsys.readouterr().err.splitlines() == [f"error: {message}"]
    assert {p: p.read_text() for p in plugin.rglob("*") if p.is_file()} == before


def test_a_new_plugin_prints_its_folder_and_the_next_commands(tmp_path, capsys):
    assert main(["plugin", "new", "layer", "demo", "--directory", str(tmp_path)]) == 0
    plugin = tmp_path / "sigmann-demo"
    assert capsys.readouterr().out.splitlines() == [
        str(plugin), "next:",
        f"  pip install -e '{plugin}[test]'   # the plugin, with its tests' kit",
        f"  python -m pytest -q {plugin}   # its tests, which pass as written",
        "  sigma plugins | grep demo   # listed once installed",
        '  in a run file: `[[network.layers]]` with `type = "demo"` and `size = 64`.']

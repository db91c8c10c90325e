"""Plugins written from docs/plugins.md alone install on the first try: every example module, with the guide's
pyproject.toml (as written for the first, with its name changed for the others, as the guide says), is a
distribution that pip installs, that ``sigma plugins`` lists, and that a run trains with.

The distributions go into a folder of their own (``pip install --target``), never into this environment: the
subprocesses see them through ``PYTHONPATH``, as if installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sigma_core.training.checkpoint import load_checkpoint

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"

RUN_FILE = """
name = "guide"
[handler]
name = "counting"
dtype = "float64"
[data]
extractor = "spirals"
n = 96
noise = 0.1
[[network.layers]]
type = "input"
shape = [2]
[[network.layers]]
type = "highway"
[[network.layers]]
type = "dense"
size = 8
activation = "swish"
[[network.layers]]
type = "dense"
size = 8
activation = "softsign"
[[network.layers]]
type = "dense"
size = 2
[[network.layers]]
type = "softmax_ce"
[initialisers]
"*.weights" = { type = "uniform_fan_in", scale = 2.0 }
[optimiser]
type = "signum"
learning_rate = 0.02
[operator]
type = "accumulate"
parts = 2
[[hooks]]
type = "decay_rate"
factor = 0.5
[training]
epochs = 2
batch_size = 16
compile = "counting"
[checkpoint]
directory = "checkpoints"
every_epochs = 2
"""


def guide_plugins() -> list[tuple[str, str, str]]:
    """(pyproject, package, module source) per plugin example of the guide: its pyproject as written for the
    example whose name it shows, with the names changed for the others."""
    text = GUIDE.read_text()
    pyprojects = [b for b in re.findall(r"```toml\n(.*?)```", text, flags=re.S) if "[project.entry-points.sigma]" in b]
    assert len(pyprojects) == 1, "the guide shows one pyproject for every example"
    pyproject = pyprojects[0]
    (shown, package), = tomllib.loads(pyproject)["project"]["entry-points"]["sigma"].items()
    modules = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "@hookimpl" in b]
    plugins = []
    for index, source in enumerate(modules):
        if f'register("{shown}"' in source:
            plugins.append((pyproject, package, source))
        else:
            plugins.append((pyproject.replace(shown, f"guide{index}"), package.replace(shown, f"guide{index}"), source))
    assert len(modules) >= 10 and sum(p[0] == pyproject for p in plugins) == 1
    return plugins


def registered(source: str) -> set[str]:
    """The names a plugin module registers: components, and the commands ``register_commands`` adds."""
    return set(re.findall(r'^    (?:register|parser = cli\.add_parser)\("(\w+)"', source, flags=re.M))


@pytest.mark.slow
def test_every_guide_plugin_installs_as_written_is_listed_and_trains(tmp_path):
    plugins = guide_plugins()
    folders = []
    for pyproject, package, source in plugins:
        folder = tmp_path / "plugins" / tomllib.loads(pyproject)["project"]["name"]
        (folder / "src" / package).mkdir(parents=True)
        (folder / "pyproject.toml").write_text(pyproject)
        (folder / "src" / package / "__init__.py").write_text(source)
        folders.append(folder)
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                                "--target", str(tmp_path / "site"), *map(str, folders)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "SIGMA_STRICT_PLUGINS": "1"}

    def sigma(*argv):
        return subprocess.run([sys.executable, "-m", "sigma_core", *argv], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    listed = sigma("plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    for (pyproject, _, source) in plugins:
        distribution = tomllib.loads(pyproject)["project"]["name"]
        assert {row["name"] for row in rows if row["distribution"] == distribution} == registered(source), distribution
        assert all(row["available"] for row in rows if row["distribution"] == distribution)

    # One run with every kind at once: an unknown or broken one would stop it in one line.
    (tmp_path / "run.toml").write_text(RUN_FILE)
    trained = sigma("train", "run.toml", "--quiet", "--strict", "--out", "result.json")
    assert trained.returncode == 0, trained.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["handler"], result["dtype"], result["epochs"]) == ("counting", "float64", 2)
    assert result["parameters"] == (2 * 2 + 2) * 2 + (2 * 8 + 8) + (8 * 8 + 8) + (8 * 2 + 2)  # highway: 2 denses
    (path,) = (tmp_path / "checkpoints").glob("guide-e2-*.ckpt")
    optimiser = load_checkpoint(path).metadata["optimiser"]
    assert optimiser["optimiser"] == "Signum" and optimiser["hyperparameters"]["learning_rate"] == 0.02 / 4
    inspected = sigma("inspect", str(path), "--layer", "2-highway")
    assert (inspected.returncode, inspected.stdout) == (0, "epoch 2\n2-highway: 12\n"), inspected.stderr

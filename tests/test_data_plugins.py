"""Extractors come from the plugin registry: Sigma's own, and a third party's used from a run file."""

from __future__ import annotations

import json

import pytest

from sigma_core import cli, plugins
from sigma_core.data import dataset_from_config
from sigma_core.errors import ConfigError

BUILT_IN = {"csv", "idx", "numpy", "npz", "sklearn", "image_folder", "mnist", "iris", "wdbc", "digits", "xor", "and"}

RING_PLUGIN = """
    import numpy as np
    from sigma_core.data import Dataset
    from sigma_core.hookspecs import hookimpl

    def rings(n=64, seed=0):
        '''Two concentric rings: a third-party extractor.'''
        rng = np.random.default_rng(seed)
        radius = rng.integers(0, 2, n)
        angle = rng.uniform(0, 6.28, n)
        inputs = np.stack([np.cos(angle), np.sin(angle)], 1) * (1 + radius)[:, None]
        return Dataset({"inputs": inputs, "targets": radius.astype(float)[:, None]}, "rings")

    @hookimpl
    def register_extractors(register):
        register("rings", rings, description="two concentric rings")
"""

RUN_FILE = """
name = "rings"
seed = 0

[data]
source = "rings"
n = 40

[split]
validation = 0.25

[[network.layers]]
type = "input"
shape = [2]

[[network.layers]]
type = "dense"
size = 1
activation = "sigmoid"

[[network.layers]]
type = "squared_difference"

[optimiser]
type = "sgd"
learning_rate = 0.1

[training]
batch_size = 10
epochs = 2
"""


def test_built_in_extractors_are_registered():
    assert BUILT_IN <= {c.name for c in plugins.components("extractor")}
    assert plugins.get("extractor", "breast_cancer").name == "wdbc"


def test_third_party_extractor_is_usable_by_name_from_a_run_file(fake_site, tmp_path):
    fake_site.add("sigmann-rings", entry_points={"rings": "rings_plugin"}, modules={"rings_plugin": RING_PLUGIN})
    plugins.reset()
    assert plugins.get("extractor", "rings").distribution == "sigmann-rings"
    assert len(dataset_from_config({"source": "rings", "n": 12})) == 12
    with pytest.raises(ConfigError, match=r"unknown key data.radius for source 'rings'; allowed: .*n, seed"):
        dataset_from_config({"source": "rings", "radius": 2})

    run_file = tmp_path / "rings.toml"
    run_file.write_text(RUN_FILE)
    result = tmp_path / "result.json"
    assert cli.main(["train", str(run_file), "--quiet", "--out", str(result)]) == 0
    assert json.loads(result.read_text())["epochs"] == 2

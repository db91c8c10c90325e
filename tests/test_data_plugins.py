"""Extractors come from the plugin registry: Sigma's own, and a third party's used from a run file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sigma_core import cli, plugins
from sigma_core.data import dataset_from_config
from sigma_core.errors import ConfigError

CORE = {"npy", "npz", "xor", "and", "synthetic"}
ROOT = Path(__file__).resolve().parents[1]

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
extractor = "rings"
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


def test_the_core_ships_only_plain_file_and_synthetic_extractors():
    core = {c.name for c in plugins.components("extractor") if c.distribution == "sigmann"}
    assert core == CORE


@pytest.mark.parametrize("source, distribution", [("digits", "sigmann-sklearn"), ("sklearn", "sigmann-sklearn"),
                                                  ("images", "sigmann-images"), ("mnist", "sigmann-mnist")])
def test_an_extractor_of_an_uninstalled_plugin_points_to_the_page_which_names_the_distribution(
        monkeypatch, source, distribution):
    monkeypatch.setenv("SIGMA_PLUGINS", "")  # the core alone, as after a bare ``pip install .``
    plugins.reset()
    with pytest.raises(ConfigError, match=rf"^data.extractor: unknown extractor '{source}' \(available: .*npz.*\); "
                                          "docs/distributions.md lists the plugins that provide more$"):
        dataset_from_config({"source": source})
    page = (ROOT / "docs" / "distributions.md").read_text()
    rows = [line for line in page.splitlines() if f"`{distribution}`" in line]
    assert any(f"`{source}`" in row for row in rows), f"docs/distributions.md's row for {distribution} misses {source}"


def test_training_the_main_job_without_sigmann_sklearn_is_one_line_naming_it(monkeypatch, capsys):
    monkeypatch.setenv("SIGMA_PLUGINS", "")
    plugins.reset()
    assert cli.main(["train", str(ROOT / "examples" / "digits.toml"), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: data.extractor: unknown extractor 'sklearn' (available: and, npy, npz, synthetic, xor); "
        "docs/distributions.md lists the plugins that provide more"]


def test_third_party_extractor_is_usable_by_name_from_a_run_file(fake_site, tmp_path):
    fake_site.add("sigmann-rings", entry_points={"rings": "rings_plugin"}, modules={"rings_plugin": RING_PLUGIN})
    plugins.reset()
    assert plugins.get("extractor", "rings").distribution == "sigmann-rings"
    assert len(dataset_from_config({"extractor": "rings", "n": 12})) == 12
    with pytest.raises(ConfigError, match=r"unknown key data.radius for source 'rings'; allowed: .*n, seed"):
        dataset_from_config({"extractor": "rings", "radius": 2})

    run_file = tmp_path / "rings.toml"
    run_file.write_text(RUN_FILE)
    result = tmp_path / "result.json"
    assert cli.main(["train", str(run_file), "--quiet", "--out", str(result)]) == 0
    assert json.loads(result.read_text())["epochs"] == 2


def test_an_extractor_may_return_a_plain_dict_of_arrays(fake_site):
    """The simplest extractor the hookspec documents: ``{"inputs": ..., "targets": ...}``."""
    from sigma_core.data import dataset_from_config

    fake_site.add("dict-plugin", entry_points={"dicts": "dict_plugin_mod"}, modules={"dict_plugin_mod": """
        import numpy
        from sigma_core.hookspecs import hookimpl

        def squares(n):
            x = numpy.arange(n, dtype=numpy.float64)[:, None]
            return {"inputs": x, "targets": x ** 2}

        @hookimpl
        def register_extractors(register):
            register("squares", squares)
    """})
    dataset = dataset_from_config({"extractor": "squares", "n": 5})
    assert len(dataset) == 5
    assert dataset.section("targets")[:, 0].tolist() == [0.0, 1.0, 4.0, 9.0, 16.0]

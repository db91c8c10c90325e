"""``import sigma_core`` is cheap, and its public names resolve on first use."""

import re
import subprocess
import sys
from importlib import metadata

import pytest

import sigma_core


def imported_by(code: str, modules: tuple[str, ...]) -> str:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``, as a printed list."""
    probe = f"{code}; import sys; print(sorted(m for m in {modules!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_import_loads_no_array_library():
    assert imported_by("import sigma_core", ("numpy", "numba", "cupy", "sklearn", "PIL")) == "[]"


def test_the_core_with_every_plugin_discovered_loads_no_optional_dependency():
    """Discovery, each component's check and the CLI parser (plugin commands too) stay light."""
    code = ("import sigma_core.data, sigma_core.plugins as p, sigma_core.cli as c; "
            "[x.availability() for x in p.components()]; c.build_parser()")
    assert imported_by(code, ("numba", "cupy", "sklearn", "PIL", "torch", "jax", "tomli_w")) == "[]"


def test_the_core_requires_only_numpy_and_pluggy():
    hard = [r for r in metadata.requires("sigmann") if "extra ==" not in r]
    assert sorted(re.match(r"[A-Za-z0-9_.-]+", r).group().lower() for r in hard) == ["numpy", "pluggy"]


@pytest.mark.parametrize("name", sigma_core.__all__)
def test_every_public_name_resolves(name):
    assert getattr(sigma_core, name) is not None


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nonexistent'"):
        sigma_core.Nonexistent  # noqa: B018


def test_top_level_names_build_and_train_a_network():
    handler = sigma_core.create_handler("numpy", dtype="float64", seed=0)
    network = sigma_core.Network(sigma_core.Input(2) + sigma_core.Dense(2) + sigma_core.SoftmaxCE())
    network.initialise(handler)
    result = network.forward({"inputs": handler.asarray([[1.0, 2.0]]), "targets": handler.asarray([1])})
    assert result.cost.value > 0

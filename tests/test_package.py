"""``import sigma_core`` is cheap, and its public names resolve on first use."""

import subprocess
import sys

import pytest

import sigma_core


def test_import_loads_no_array_library():
    code = "import sys, sigma_core; print(sorted(m for m in ('numpy', 'numba', 'cupy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


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

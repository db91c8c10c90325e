"""Initialisers: values and statistics, seeds, pattern specificity, config."""

from __future__ import annotations

import math

import numpy
import pytest

from sigma_core import NumpyHandler, build
from sigma_core.errors import ConfigError, ShapeError
from sigma_core.model.initialisers import (
    Constant,
    Custom,
    Gaussian,
    He,
    Uniform,
    Xavier,
    apply_initialisers,
    fans,
    specificity,
)


def filled(initialiser, shape, seed=0, dtype="float64"):
    h = NumpyHandler(dtype, seed)
    array = h.zeros(shape)
    initialiser.initialise(h, array)
    return array.to_numpy()


def network_params(h):
    return {
        "1-dense.weights": h.zeros((4, 3)),
        "1-dense.bias": h.zeros(3),
        "2-dense.weights": h.zeros((3, 2)),
        "2-dense.bias": h.zeros(2),
    }


def test_constant():
    assert numpy.all(filled(Constant(0.25), (3, 4)) == 0.25)


def test_gaussian_mean_and_std():
    values = filled(Gaussian(std=0.1, mean=0.5), (400, 500))
    assert abs(values.mean() - 0.5) < 5 * 0.1 / math.sqrt(values.size)
    assert abs(values.std() / 0.1 - 1) < 0.01


def test_uniform_bounds():
    values = filled(Uniform(-2.0, 3.0), (100_000,))
    assert values.min() >= -2.0 and values.max() < 3.0
    assert abs(values.mean() - 0.5) < 0.05


def test_fans():
    assert fans((300, 200)) == (300, 200)
    assert fans((50,)) == (50, 50)
    assert fans((3, 3, 16, 32)) == (144, 288)


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_xavier_bounds_from_fan_in_and_out(gain):
    values = filled(Xavier(gain=gain), (300, 200))
    limit = gain * math.sqrt(6 / 500)
    assert numpy.abs(values).max() <= limit
    assert numpy.abs(values).max() > 0.99 * limit
    assert abs(values.std() / (limit / math.sqrt(3)) - 1) < 0.02


def test_xavier_on_a_vector_uses_its_size():
    limit = math.sqrt(6 / 100)
    values = filled(Xavier(), (50,))
    assert numpy.abs(values).max() <= limit and numpy.abs(values).max() > 0.5 * limit


def test_he_std_from_fan_in():
    values = filled(He(), (400, 300))
    assert abs(values.std() / math.sqrt(2 / 400) - 1) < 0.02
    assert abs(values.mean()) < 0.01


def test_custom_gets_the_shape_and_a_seeded_generator():
    def fn(shape, rng):
        return rng.integers(0, 100, size=shape)

    first, again, other = filled(Custom(fn), (5, 6), 3), filled(Custom(fn), (5, 6), 3), filled(Custom(fn), (5, 6), 4)
    assert first.shape == (5, 6) and numpy.all(first == numpy.round(first))
    assert numpy.array_equal(first, again)
    assert not numpy.array_equal(first, other)


def test_custom_of_the_wrong_shape_is_an_error():
    with pytest.raises(ShapeError, match=r"returned shape \(2,\), expected \(3,\)"):
        filled(Custom(lambda shape, rng: numpy.zeros(2)), (3,))


def test_a_seed_reproduces_every_random_initialiser():
    bindings = {"*.weights": Xavier(), "1-dense.bias": Gaussian(0.1), "2-dense.bias": Custom(lambda s, r: r.random(s))}

    def run(seed):
        h = NumpyHandler("float32", seed)
        params = network_params(h)
        apply_initialisers(h, params, bindings)
        return {pid: p.to_numpy() for pid, p in params.items()}

    first, again, other = run(7), run(7), run(8)
    for pid in first:
        assert numpy.array_equal(first[pid], again[pid]), pid
        assert not numpy.array_equal(first[pid], other[pid]), pid


@pytest.mark.parametrize("order", ["general first", "specific first"])
def test_the_more_specific_pattern_wins_regardless_of_order(order):
    h = NumpyHandler("float64", 0)
    params = network_params(h)
    items = [("*.weights", Gaussian(1.0)), ("2-dense.weights", Constant(0.5))]
    bindings = dict(items if order == "general first" else items[::-1])
    applied = apply_initialisers(h, params, bindings)
    assert applied == {"1-dense.weights": "*.weights", "2-dense.weights": "2-dense.weights"}
    assert numpy.all(params["2-dense.weights"].to_numpy() == 0.5)
    assert numpy.all(params["1-dense.weights"].to_numpy() != 0.5)
    assert numpy.all(params["1-dense.bias"].to_numpy() == 0)  # matched by nothing: untouched


def test_specificity_ordering():
    patterns = ["*", "2-dense.weights", "*.weights", "*-dense.weights", "*-dense.*"]
    assert sorted(patterns, key=specificity, reverse=True) == [
        "2-dense.weights", "*-dense.weights", "*.weights", "*", "*-dense.*",
    ]
    assert specificity("[12]-dense.weights") == specificity("?-dense.weights") == specificity("*-dense.weights")


def test_a_pattern_matching_nothing_is_a_config_error():
    h = NumpyHandler()
    with pytest.raises(ConfigError, match=r"'\*\.weigths' matches no parameter.*1-dense\.weights, 1-dense\.bias"):
        apply_initialisers(h, network_params(h), {"*.weights": He(), "*.weigths": He()})


def test_initialising_inside_a_session_leaves_parameters_valid():
    h = NumpyHandler("float64", 0)
    params = network_params(h)
    with h.session():
        apply_initialisers(h, params, {"*": Gaussian()})
    with h.session():
        assert numpy.all(params["1-dense.weights"].to_numpy() != 0)


def test_an_initialiser_is_built_from_its_table():
    gaussian = build("initialiser", {"type": "gaussian", "std": 0.1})
    assert isinstance(gaussian, Gaussian) and gaussian.std == 0.1
    assert isinstance(build("initialiser", {"type": "normal"}), Gaussian)
    assert isinstance(build("initialiser", {"type": "glorot", "gain": 2}), Xavier)
    assert isinstance(build("initialiser", {"type": "he"}), He)
    with pytest.raises(ConfigError, match="unknown key initialiser.sdt for initialiser 'gaussian'; allowed: std, mean"):
        build("initialiser", {"type": "gaussian", "sdt": 0.1})
    with pytest.raises(ConfigError, match="initialiser.high is required for initialiser 'uniform'"):
        build("initialiser", {"type": "uniform", "low": 0})

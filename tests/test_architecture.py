"""Constructs, architectures and networks: linking, naming, validation, copies and state."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import NumpyHandler
from sigma_core.model.architecture import Architecture, Construct, from_layer_list
from sigma_core.model.constructs import Add, Concatenate, Dense, Dropout, Input, SoftmaxCE
from sigma_core.errors import ArchitectureError, ConfigError, ShapeError, SigmaError
from sigma_core.model.network import Network


def initialised(architecture, dtype="float64", seed=0):
    handler = NumpyHandler(dtype, seed=seed)
    network = Network(architecture)
    network.initialise(handler)
    return handler, network


def predict(handler, network, x, training=False):
    with handler.no_grad():
        return network.forward({"inputs": handler.asarray(x)}, training=training).outputs["predictions"].to_numpy()


# -- building with + and n * ------------------------------------------------------------------------


def test_plus_links_each_construct_to_the_previous_one():
    first, second, third = Input(4), Dense(3, "relu"), Dense(2)
    architecture = first + second + third + SoftmaxCE()
    assert isinstance(architecture, Architecture)
    assert len(architecture) == 4
    assert architecture.constructs[:3] == [first, second, third]
    assert first.inputs == [] and second.inputs == [first] and third.inputs == [second]
    network = Network(architecture)
    assert list(network.layers) == ["1-input", "2-dense", "3-dense", "4-softmax_ce"]
    assert network._sources == {"1-input": [], "2-dense": ["1-input"], "3-dense": ["2-dense"], "4-softmax_ce": ["3-dense"]}
    assert network.layers["3-dense"].output_shape == (2,)


def test_shorthands_take_the_first_arguments_by_position_and_the_rest_by_keyword():
    dense = Dense(3, "relu", bias=False, name="d")
    assert (dense.layer_type, dense.name) == ("dense", "d")
    assert dense.params == {"size": 3, "activation": "relu", "bias": False}
    with pytest.raises(TypeError, match=r"dense takes 2 positional argument\(s\) \(size, activation\), got 3"):
        Dense(3, "relu", False)
    assert Network(Input(4) + Dense(3)).layers["2-dense"].parameter_shapes == {"weights": (4, 3), "biases": (3,)}


def test_repetition_numbers_names_and_chains_copies():
    architecture = Input(4) + 2 * (Dense(3) + Dense(3)) + SoftmaxCE()
    network = Network(architecture)
    names = ["1-input", "2-dense", "3-dense", "4-dense", "5-dense", "6-softmax_ce"]
    assert list(network.layers) == names
    for previous, name in zip(names, names[1:]):
        assert network._sources[name] == [previous]
    # the repeated constructs are distinct copies
    assert len({id(c) for c in architecture.constructs}) == 6


def test_repetition_pads_numbers_to_the_same_width():
    network = Network(Input(4) + 5 * (Dense(3) + Dense(3)) + SoftmaxCE())
    names = list(network.layers)
    assert names[0] == "01-input" and names[1] == "02-dense" and names[-1] == "12-softmax_ce"
    assert len(set(names)) == 12


def test_repeating_a_construct_without_hash_in_its_name_is_an_error():
    with pytest.raises(ArchitectureError, match="'fixed'.*'#'"):
        Input(4) + 2 * Dense(3, name="fixed")
    with pytest.raises(ArchitectureError, match="positive whole number"):
        0 * Dense(3)


def test_duplicate_names_are_an_error():
    with pytest.raises(ArchitectureError, match="two layers are named 'twin'"):
        Network(Input(4) + Dense(3, name="twin") + Dense(3, name="twin"))


def test_a_cycle_is_an_error_naming_its_layers():
    source = Input(4, name="source")
    alpha = Construct("dense", name="alpha", size=4).link(source)
    beta = Construct("dense", name="beta", size=4).link(alpha)
    alpha.link(beta)
    with pytest.raises(ArchitectureError, match="cycle") as error:
        Network(Architecture([source, alpha, beta]))
    message = str(error.value)
    assert "alpha" in message and "beta" in message and "source" not in message


def test_linking_the_same_source_twice_is_an_error():
    source = Input(4, name="x")
    with pytest.raises(ArchitectureError, match="already linked"):
        Add(name="double").link(source, source)


def test_a_source_outside_the_architecture_is_an_error():
    outsider = Input(4, name="outsider")
    dense = Dense(3, name="d").link(outsider)
    with pytest.raises(ArchitectureError, match="outsider"):
        Network(Architecture([Input(4, name="x"), dense]))


def test_unknown_layer_type_lists_the_available_ones():
    with pytest.raises(ArchitectureError) as error:
        Network(Input(4) + Construct("dense_layer_typo", size=3))
    message = str(error.value)
    assert "dense_layer_typo" in message
    for available in ("dense", "dropout", "softmax_ce"):
        assert available in message


def test_layers_with_the_wrong_number_of_inputs_are_errors():
    with pytest.raises(ArchitectureError, match="'lonely'.*takes 1 input"):
        Network(Architecture([Construct("dropout", name="lonely", p=0.1)]))
    # merge layers need at least one input (was an IndexError for concatenate)
    for layer_type in ("concatenate", "add"):
        specs = [{"type": "input", "shape": [3]}, {"type": layer_type, "name": "merge", "inputs": []}]
        with pytest.raises(ArchitectureError, match="'merge'.*one or more inputs"):
            Network(from_layer_list(specs))


# -- shapes and parameters ----------------------------------------------------------------------


def test_concatenate_of_incompatible_shapes_is_a_shape_error():
    a, b = Input(3, 4, name="a"), Input(5, name="b", external="b")
    with pytest.raises(ShapeError, match="'joined'.*\\(3, 4\\).*\\(5,\\)"):
        Network(Architecture([a, b, Concatenate(name="joined").link(a, b)]))
    c, d = Input(3, 4, name="c"), Input(2, 4, name="d", external="d")
    with pytest.raises(ShapeError, match="'joined'"):
        Network(Architecture([c, d, Concatenate(name="joined").link(c, d)]))


def test_add_of_different_sizes_is_a_shape_error():
    source = Input(4, name="x")
    left, right = Dense(3, name="left").link(source), Dense(5, name="right").link(source)
    with pytest.raises(ShapeError, match="'residual'.*\\(3,\\).*\\(5,\\)"):
        Network(Architecture([source, left, right, Add(name="residual").link(left, right)]))


def test_time_distributed_layers_need_sequences():
    with pytest.raises(ArchitectureError, match="'td'"):
        Network(Input(4) + Dense(3, name="td", time_distributed=True))


def test_unknown_layer_parameter_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="unknown key 2-dense.activaton for layer 'dense'") as error:
        Network(Input(4) + Construct("dense", size=3, activaton="relu"))
    assert "size" in str(error.value)  # the accepted parameters are listed
    with pytest.raises(ConfigError, match="2-dense.size is required for layer 'dense'"):
        Network(Input(4) + Construct("dense"))


def test_unknown_activation_is_a_config_error_naming_the_layer():
    with pytest.raises(ConfigError, match="'hidden'.*swishy"):
        Network(Input(4) + Dense(3, "swishy", name="hidden"))


def test_from_layer_list_with_an_unknown_input_name_is_an_error():
    specs = [
        {"type": "input", "shape": [4], "name": "x"},
        {"type": "dense", "size": 3, "name": "hidden", "inputs": ["x", "nowhere"]},
    ]
    with pytest.raises(ArchitectureError, match="'nowhere'") as error:
        from_layer_list(specs)
    assert "x" in str(error.value)
    with pytest.raises(ArchitectureError, match=r"network.layers\[0\] must be a table with a type"):
        from_layer_list([{"shape": [4]}])


def test_from_layer_list_builds_graphs_by_name():
    specs = [
        {"type": "input", "shape": [4], "name": "x"},
        {"type": "dense", "size": 3, "name": "a"},
        {"type": "dense", "size": 3, "name": "b", "inputs": ["x"]},
        {"type": "add", "name": "sum", "inputs": ["a", "b"]},
        {"type": "softmax_ce"},
    ]
    network = Network(from_layer_list(specs))
    assert network._sources["a"] == ["x"]
    assert network._sources["b"] == ["x"]
    assert network._sources["sum"] == ["a", "b"]
    assert network._sources["5-softmax_ce"] == ["sum"]


@pytest.mark.parametrize("p", [1.0, 1.5, -0.1])
def test_dropout_probability_outside_the_unit_interval_is_an_error(p):
    with pytest.raises(ConfigError, match=r"2-dropout.p: expected a finite number in \[0, 1\), got"):
        Network(Input(4) + Dropout(p))


def test_dropout_zero_is_allowed():
    handler, network = initialised(Input(4) + Dropout(0.0))
    x = numpy.arange(8.0).reshape(2, 4)
    numpy.testing.assert_array_equal(predict(handler, network, x, training=True), x)


def test_parameter_count_of_a_known_mlp():
    network = Network(Input(64) + Dense(128, "relu") + Dropout(0.1) + Dense(10) + SoftmaxCE())
    assert network.parameter_count == 64 * 128 + 128 + 128 * 10 + 10 == 9610
    assert "9,610 parameters" in network.summary()
    assert Network(Input(8) + Dense(4, bias=False)).parameter_count == 32
    handler, initialised_network = initialised(Input(64) + Dense(128, "relu") + Dense(10))
    assert sum(a.size for a in initialised_network.parameters.values()) == initialised_network.parameter_count


def test_parameter_ids_are_layer_dot_param():
    _, network = initialised(Input(4) + Dense(3, name="hidden") + Dense(2, name="head"))
    assert list(network.parameters) == ["hidden.weights", "hidden.biases", "head.weights", "head.biases"]
    assert network.parameters["hidden.weights"].shape == (4, 3)


# -- copies and state --------------------------------------------------------------------------------


def test_copy_is_independent_of_the_original():
    handler, network = initialised(Input(4) + Dense(3, "tanh") + Dense(2))
    x = numpy.random.default_rng(0).normal(size=(5, 4))
    twin = network.copy()
    assert twin is not network and twin.handler is handler
    before = network.state_dict()
    for pid, array in twin.parameters.items():
        assert array is not network.parameters[pid]
        numpy.testing.assert_array_equal(array.to_numpy(), before[pid])
    numpy.testing.assert_array_equal(predict(handler, twin, x), predict(handler, network, x))

    for array in twin.parameters.values():
        handler.fill(array, 7.0)
    for pid, value in network.state_dict().items():
        numpy.testing.assert_array_equal(value, before[pid])
    assert not numpy.allclose(predict(handler, twin, x), predict(handler, network, x))

    # and the other way round
    twin_state = twin.state_dict()
    for array in network.parameters.values():
        handler.fill(array, -1.0)
    for pid, value in twin.state_dict().items():
        numpy.testing.assert_array_equal(value, twin_state[pid])


def test_copy_onto_another_handler():
    handler, network = initialised(Input(4) + Dense(3, "tanh") + Dense(2), dtype="float64")
    other = NumpyHandler("float32", seed=1)
    twin = network.copy(other)
    assert twin.handler is other
    assert all(a.dtype == "float32" for a in twin.parameters.values())
    x = numpy.random.default_rng(0).normal(size=(5, 4))
    numpy.testing.assert_allclose(predict(other, twin, x), predict(handler, network, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("source_dtype, target_dtype", [("float32", "float64"), ("float64", "float32")])
def test_transfer_parameters_between_dtypes(source_dtype, target_dtype):
    layers = Input(3, 4) + Dense(5, "tanh", time_distributed=True) + Dense(6, "relu") + Dense(2)
    _, source = initialised(layers, dtype=source_dtype, seed=1)
    _, target = initialised(layers, dtype=target_dtype, seed=2)
    assert any(
        not numpy.allclose(source.parameters[pid].to_numpy(), target.parameters[pid].to_numpy())
        for pid in source.parameters
    )
    source.transfer_parameters_to(target)
    for pid, array in target.parameters.items():
        assert array.dtype == target_dtype
        numpy.testing.assert_allclose(array.to_numpy(), source.parameters[pid].to_numpy(), rtol=1e-6, atol=1e-7)


def test_load_state_dict_rejects_wrong_shapes_and_keys():
    _, network = initialised(Input(4) + Dense(3, name="hidden"))
    state = network.state_dict()
    wrong = dict(state, **{"hidden.weights": numpy.zeros((3, 4))})
    with pytest.raises(ArchitectureError, match="'hidden.weights'.*\\(3, 4\\).*\\(4, 3\\)"):
        network.load_state_dict(wrong)
    missing = {k: v for k, v in state.items() if k != "hidden.biases"}
    with pytest.raises(ArchitectureError, match="hidden.biases"):
        network.load_state_dict(missing)
    with pytest.raises(ArchitectureError, match="hidden.extra"):
        network.load_state_dict(dict(state, **{"hidden.extra": numpy.zeros(1)}))
    network.load_state_dict({k: numpy.full(v.shape, 0.5) for k, v in state.items()})
    assert all((v == 0.5).all() for v in network.state_dict().values())


def test_state_dict_is_a_copy():
    _, network = initialised(Input(4) + Dense(3, name="hidden"))
    state = network.state_dict()
    state["hidden.weights"][...] = 123.0
    assert not (network.state_dict()["hidden.weights"] == 123.0).any()


def test_forward_before_initialise_is_an_error():
    network = Network(Input(4) + Dense(3))
    with pytest.raises(SigmaError, match="not initialised"):
        network.forward({})


# -- dropout: training vs inference ----------------------------------------------------------------------


def test_inference_ignores_dropout_training_does_not():
    handler, network = initialised(Input(200) + Dense(50, "tanh") + Dropout(0.5) + Dense(3), seed=3)
    x = numpy.random.default_rng(0).normal(size=(4, 200))
    first, second = predict(handler, network, x), predict(handler, network, x)
    numpy.testing.assert_array_equal(first, second)
    trained_a = predict(handler, network, x, training=True)
    trained_b = predict(handler, network, x, training=True)
    assert not numpy.allclose(trained_a, first)
    assert not numpy.allclose(trained_a, trained_b)


def test_dropout_layer_zeroes_and_rescales_in_training_only():
    handler, network = initialised(Input(1000) + Dropout(0.2))
    x = numpy.ones((2, 1000))
    numpy.testing.assert_array_equal(predict(handler, network, x), x)
    y = predict(handler, network, x, training=True)
    assert set(numpy.unique(y)) <= {0.0, 1.25}
    assert 0.15 < (y == 0).mean() < 0.25

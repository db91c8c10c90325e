"""Registries and the resolver: Sigma's TestRegistry and TestRegistryResolver cases,
plus the rules this port adds (number widening, one place per registry, caching)."""

import numpy
import pytest

from sigma_core import NumpyHandler, SigmaError
from sigmann_criteria.registry import (
    DuplicateKeyError,
    Registry,
    RegistryError,
    RegistryKeyError,
    RegistryResolver,
    RegistryTypeError,
    registry_from_dict,
)


# -- TestRegistry ---------------------------------------------------------------------------
def test_read_write():
    registry = Registry()
    registry["a"] = 1
    registry["b"] = "text"
    assert registry["a"] == 1 and registry["b"] == "text"
    registry["a"] = 2
    assert registry["a"] == 2
    assert dict(registry) == {"a": 2, "b": "text"}
    assert len(registry) == 2 and "a" in registry and "c" not in registry


def test_missing_key_names_the_full_identifier():
    root = registry_from_dict({"network": {"layers": {}}})
    with pytest.raises(RegistryKeyError, match=r"'network\.layers\.fc1'"):
        root["network"]["layers"]["fc1"]
    assert root.get("nothing", 7) == 7  # Mapping.get still works: a RegistryKeyError is a KeyError


def test_add_refuses_a_duplicate_key():
    registry = Registry()
    registry.add("key", 1)
    with pytest.raises(DuplicateKeyError, match="'key'"):
        registry.add("key", 2)
    assert registry["key"] == 1


def test_set_of_a_wrong_type_raises_naming_the_key_and_both_types():
    root = registry_from_dict({"optimiser": {"learning_rate": 0.1}})
    with pytest.raises(RegistryTypeError, match=r"'optimiser\.learning_rate' holds float.*str"):
        root["optimiser"]["learning_rate"] = "fast"
    assert root.get_path("optimiser.learning_rate") == 0.1
    assert issubclass(RegistryTypeError, SigmaError)


def test_explicit_type_is_checked():
    registry = Registry()
    with pytest.raises(RegistryTypeError):
        registry.set("key", "text", type=int)


def test_unchecked_registry_accepts_any_type():
    registry = Registry(check_types=False)
    registry["key"] = 1.0
    registry["key"] = "text"
    assert registry["key"] == "text"
    assert registry.get_type("key") is str


def test_int_widens_to_float_but_not_the_other_way():
    registry = Registry()
    registry["rate"] = 0.5
    registry["rate"] = 2
    assert registry["rate"] == 2.0 and type(registry["rate"]) is float
    registry["count"] = 3
    with pytest.raises(RegistryTypeError, match="'count' holds int"):
        registry["count"] = 3.5
    with pytest.raises(RegistryTypeError, match="bool"):
        registry["count"] = True


def test_numpy_scalars_are_stored_as_python_numbers():
    registry = Registry()
    registry["cost"] = numpy.float32(0.25)
    assert registry.get_type("cost") is float and type(registry["cost"]) is float
    registry["cost"] = 0.125  # a literal fits the key a NumPy value created
    registry["epoch"] = numpy.int64(3)
    assert registry.get_type("epoch") is int


def test_none_is_a_placeholder_that_fixes_no_type():
    registry = Registry()
    registry["best"] = None
    assert registry.get_type("best") is None
    registry["best"] = 0.9
    registry["best"] = None
    with pytest.raises(RegistryTypeError):
        registry["best"] = "high"


def test_a_sub_registry_may_replace_a_sub_registry():
    root = registry_from_dict({"architecture": {"complexity": 1}})
    root["architecture"] = registry_from_dict({"complexity": 2})
    assert root.get_path("architecture.complexity") == 2
    with pytest.raises(RegistryTypeError):
        root["architecture"] = 3


def test_remove_forgets_the_value_and_its_type():
    registry = Registry()
    registry["key"] = 1
    assert registry.remove("key") == 1
    assert "key" not in registry
    registry["key"] = "now a string"  # no type remembered
    del registry["key"]
    with pytest.raises(RegistryKeyError):
        registry.remove("key")


def test_values_matching_by_regex_and_type():
    registry = Registry()
    registry["weights"] = 1.0
    registry["weights_grad"] = 2.0
    registry["bias"] = 3.0
    registry["weights_name"] = "w"
    assert registry.values_matching("weights") == [1.0, 2.0, "w"]  # re.search, as Sigma
    assert registry.values_matching("^weights$") == [1.0]
    assert registry.values_matching("weights", type=float) == [1.0, 2.0]
    assert registry.values_matching("nothing") == []


def test_get_type():
    registry = Registry()
    registry["a"] = 1.5
    registry["b"] = Registry()
    assert registry.get_type("a") is float
    assert registry.get_type("b") is Registry
    with pytest.raises(RegistryKeyError):
        registry.get_type("c")


def test_get_type_keeps_a_deliberately_wrong_type_while_unchecked():
    registry = Registry(check_types=False)
    registry.set("key", "text", type=int)
    assert registry.get_type("key") is int
    assert registry["key"] == "text"


def test_deep_copy_is_independent():
    handler = NumpyHandler("float64", seed=0)
    weights = handler.asarray(numpy.ones(3))
    root = registry_from_dict(
        {"network": {"layers": {"fc1": {"weights": weights, "shape": [3]}}}, "epoch": 1},
        tags={"trainer"},
    )
    root["network"]["layers"]["fc1"].tags = {"layer", "fc"}
    clone = root.deep_copy()

    assert list(clone) == list(root) and clone["epoch"] == 1
    assert clone.tags == {"trainer"} and clone.parent is None
    fc1 = clone.get_path("network.layers.fc1")
    assert fc1.tags == {"layer", "fc"} and fc1.root is clone and fc1.identifier == "network.layers.fc1"
    assert fc1 is not root.get_path("network.layers.fc1")

    clone["epoch"] = 2
    fc1["shape"].append(4)
    handler.fill(weights, 5.0)
    assert root["epoch"] == 1 and root.get_path("network.layers.fc1.shape") == [3]
    numpy.testing.assert_array_equal(fc1["weights"].to_numpy(), numpy.ones(3))
    with pytest.raises(RegistryTypeError):
        clone["epoch"] = "two"  # types are copied too


def test_deep_copy_of_an_array_survives_the_next_session():
    handler = NumpyHandler("float64", seed=0)
    registry = Registry()
    with handler.session():
        registry["cost"] = handler.asarray(numpy.array([1.0, 2.0]))
        snapshot = registry.deep_copy()
    handler.begin_session()  # recycles the arrays of the last session
    numpy.testing.assert_array_equal(snapshot["cost"].to_numpy(), [1.0, 2.0])


def test_parent_and_root_chain():
    a, b, c = Registry(), Registry(), Registry()
    a["b"] = b
    b["c"] = c
    assert a.parent is None and a.root is a
    assert b.parent is a and b.root is a
    assert c.parent is b and c.root is a
    assert c.identifier == "b.c" and c.full_key("x") == "b.c.x"
    a.remove("b")
    assert b.parent is None and c.root is b


def test_a_registry_lives_in_one_place():
    a, child = Registry(), Registry()
    a["x"] = child
    a["x"] = child  # setting it where it is is fine
    with pytest.raises(RegistryError, match="already lives elsewhere"):
        a["y"] = child
    with pytest.raises(RegistryError, match="cycle"):
        child["up"] = a


def test_keys_cannot_hold_identifier_syntax():
    registry = Registry()
    for key in ("a.b", "*", "x<y>", ""):
        with pytest.raises(RegistryError, match="invalid registry key"):
            registry[key] = 1


# -- dot identifiers -----------------------------------------------------------------------
def test_get_and_set_path():
    root = registry_from_dict({"network": {"layers": {"fc1": {"weights": 1.0}}}})
    assert root.get_path("network.layers.fc1.weights") == 1.0
    root.set_path("network.layers.fc1.weights", 2.0)
    root.set_path("network.layers.fc1.bias", 0.5)  # the last level may be new
    assert root["network"]["layers"]["fc1"]["weights"] == 2.0
    assert root.get_path("network.layers.fc1.bias") == 0.5
    assert root.get_path("network.layers.fc2.weights", None) is None
    with pytest.raises(RegistryKeyError, match=r"'network\.layers\.fc2'"):
        root.set_path("network.layers.fc2.weights", 1.0)  # intermediates are not created
    with pytest.raises(RegistryKeyError, match="not a registry"):
        root.get_path("network.layers.fc1.weights.value")


# -- TestRegistryResolver ------------------------------------------------------------------
@pytest.fixture
def trainers():
    """Sigma's fixture: two tagged trainers with tagged architectures, and an untagged child."""
    root = Registry()
    for name in ("trainer1", "trainer2"):
        trainer = Registry({"trainer"})
        trainer["architecture"] = Registry({"architecture"})
        trainer["accuracy"] = 0.0
        root[name] = trainer
    root["trainer3"] = Registry({"trainer"})
    root["child"] = Registry()
    return root


def test_direct_set_and_get(trainers):
    resolver = RegistryResolver(trainers)
    assert resolver.resolve_set("trainer1.accuracy", 1.0) == ["trainer1.accuracy"]
    assert resolver.resolve_get("trainer1.accuracy") == [("trainer1.accuracy", 1.0)]
    assert trainers["trainer2"]["accuracy"] == 0.0


def test_wildcard_resolution_gives_full_ids(trainers):
    resolver = RegistryResolver(trainers)
    resolver.resolve_set("trainer1.accuracy", 1.0)
    resolver.resolve_set("trainer2.accuracy", 1.0)
    assert resolver.resolve_get("trainer*.accuracy") == [
        ("trainer1.accuracy", 1.0),
        ("trainer2.accuracy", 1.0),
    ]


def test_tag_resolution(trainers):
    resolver = RegistryResolver(trainers)
    assert resolver.resolve_set("*<trainer>.*<architecture>.complexity", 9) == []  # keys are not created
    for name in ("trainer1", "trainer2"):
        trainers[name]["architecture"]["complexity"] = 0
    assert resolver.resolve_set("*<trainer>.*<architecture>.complexity", 9) == [
        "trainer1.architecture.complexity",
        "trainer2.architecture.complexity",
    ]
    values = resolver.resolve_get("*<trainer>.architecture.complexity")
    assert [value for _, value in values] == [9, 9]
    tagged = resolver.resolve_get("*<trainer>")
    assert [full_id for full_id, _ in tagged] == ["trainer1", "trainer2", "trainer3"]
    assert all(isinstance(value, Registry) for _, value in tagged)


@pytest.fixture
def network():
    layers = Registry()
    for name, tags in (("fc1", {"layer", "fc"}), ("drop", {"layer"}), ("fc2", {"layer", "fc"})):
        layer = Registry(tags)
        layer["weights"] = float(len(layers))
        layers[name] = layer
    layers["out-dense"] = Registry({"layer", "dense"})
    layers["out-dense"]["weights"] = 9.0
    return registry_from_dict({"network": {"layers": layers}})


def test_wildcard_over_layers_returns_each_with_its_full_id(network):
    resolver = RegistryResolver(network)
    assert resolver.resolve_get("network.layers.*.weights") == [
        ("network.layers.fc1.weights", 0.0),
        ("network.layers.drop.weights", 1.0),
        ("network.layers.fc2.weights", 2.0),
        ("network.layers.out-dense.weights", 9.0),
    ]
    assert resolver.resolve_get("network.layers.*-dense.weights") == [("network.layers.out-dense.weights", 9.0)]
    assert [full_id for full_id, _ in resolver.resolve_get("*.*.*")] == [
        f"network.layers.{name}" for name in ("fc1", "drop", "fc2", "out-dense")
    ]


def test_tag_filter_matches_only_tagged_registries(network):
    resolver = RegistryResolver(network)
    assert [i for i, _ in resolver.resolve_get("network.layers.*<fc>.weights")] == [
        "network.layers.fc1.weights",
        "network.layers.fc2.weights",
    ]
    assert [i for i, _ in resolver.resolve_get("network.layers.*<layer, dense>.weights")] == [
        "network.layers.out-dense.weights"
    ]
    assert resolver.resolve_get("network.layers.*<fc,dense>.weights") == []
    assert [i for i, _ in resolver.resolve_get("network.layers.fc1<fc>.weights")] == ["network.layers.fc1.weights"]
    assert resolver.resolve_get("network.layers.drop<fc>.weights") == []


def test_resolve_set_sets_every_match(network):
    resolver = RegistryResolver(network)
    assert resolver.resolve_set("network.layers.*<fc>.weights", 0.5) == [
        "network.layers.fc1.weights",
        "network.layers.fc2.weights",
    ]
    layers = network["network"]["layers"]
    assert [layers[name]["weights"] for name in ("fc1", "drop", "fc2")] == [0.5, 1.0, 0.5]


def test_cache_refreshes_after_a_sub_registry_is_replaced(trainers):
    resolver = RegistryResolver(trainers)
    trainers["trainer1"]["architecture"]["complexity"] = 1
    trainers["trainer2"]["architecture"]["complexity"] = 2
    assert [v for _, v in resolver.resolve_get("*.architecture.complexity")] == [1, 2]

    replacement = Registry({"architecture"})
    replacement["complexity"] = 10
    trainers["trainer1"]["architecture"] = replacement
    assert [v for _, v in resolver.resolve_get("*.architecture.complexity")] == [10, 2]
    resolver.resolve_set("*.architecture.complexity", 11)
    assert replacement["complexity"] == 11


def test_cache_refreshes_after_keys_or_tags_change(network):
    resolver = RegistryResolver(network)
    assert len(resolver.resolve_get("network.layers.*<fc>.weights")) == 2
    fc3 = Registry({"layer", "fc"})
    fc3["weights"] = 3.0
    network["network"]["layers"]["fc3"] = fc3
    assert len(resolver.resolve_get("network.layers.*<fc>.weights")) == 3
    network["network"]["layers"]["drop"].tags = {"layer", "fc"}
    assert len(resolver.resolve_get("network.layers.*<fc>.weights")) == 4
    network["network"]["layers"].remove("fc1")
    assert len(resolver.resolve_get("network.layers.*<fc>.weights")) == 3


def test_cached_results_read_values_fresh(network):
    resolver = RegistryResolver(network)
    resolver.resolve_get("network.layers.fc1.weights")
    network.set_path("network.layers.fc1.weights", 42.0)
    assert resolver.resolve_get("network.layers.fc1.weights") == [("network.layers.fc1.weights", 42.0)]


def test_unknown_path_gives_an_empty_list(network):
    resolver = RegistryResolver(network)
    assert resolver.resolve_get("network.nothing.weights") == []
    assert resolver.resolve_get("network.layers.fc1.weights.deeper") == []
    assert resolver.resolve_set("network.layers.*.nothing", 1.0) == []


def test_malformed_identifiers_raise(network):
    resolver = RegistryResolver(network)
    for identifier in ("", "network..layers", "network.<fc>", "network.layers.*<fc"):
        with pytest.raises(RegistryError, match="malformed registry identifier"):
            resolver.resolve_get(identifier)


def test_type_protection_through_resolve_set_names_the_key_and_changes_nothing(network):
    resolver = RegistryResolver(network)
    layers = network["network"]["layers"]
    layers["fc1"].check_types = False  # fc1 would accept the string; drop, the next match, will not
    with pytest.raises(RegistryTypeError, match=r"'network\.layers\.drop\.weights' holds float"):
        resolver.resolve_set("network.layers.*.weights", "text")
    assert [layers[name]["weights"] for name in ("fc1", "drop", "fc2")] == [0.0, 1.0, 2.0]


def test_resolve_set_will_not_put_one_registry_in_two_places(trainers):
    resolver = RegistryResolver(trainers)
    with pytest.raises(RegistryError, match="one place"):
        resolver.resolve_set("trainer*.architecture", Registry())


def test_resolver_below_the_absolute_root_sees_changes(trainers):
    outer = Registry()
    outer["trainers"] = trainers
    resolver = RegistryResolver(trainers)
    assert len(resolver.resolve_get("*<trainer>")) == 3
    trainers["trainer4"] = Registry({"trainer"})
    assert len(resolver.resolve_get("*<trainer>")) == 4
    with pytest.raises(RegistryTypeError, match=r"'trainers\.trainer1\.accuracy'"):
        resolver.resolve_set("trainer1.accuracy", "high")  # errors name the key from the absolute root


# -- registry_from_dict ---------------------------------------------------------------------
def test_registry_from_dict_builds_nested_registries():
    fc1 = Registry({"layer", "fc"})
    root = registry_from_dict(
        {"network": {"layers": {"fc1": fc1}}, "optimiser": {"learning_rate": 0.1}, "epoch": 0, "shared": {}},
        tags={"trainer"},
    )
    assert root.tags == {"trainer"}
    assert isinstance(root["optimiser"], Registry) and root["optimiser"].parent is root
    assert root.get_path("network.layers.fc1") is fc1 and fc1.identifier == "network.layers.fc1"
    assert isinstance(root["shared"], Registry) and len(root["shared"]) == 0
    assert root.get_type("epoch") is int

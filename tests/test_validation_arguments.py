"""The one argument check every component built from a run file goes through (sigma_core.config)."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import plugins
from sigma_core.config import check
from sigma_core.errors import ConfigError


class Component:
    """Rules from defaults, annotations, conventions and a declaration."""

    argument_rules = {"ratio": "number in (0, 1]"}

    def __init__(self, count=3, scale=1.0, verbose=False, label: str | None = None, size: str = "big", ratio=0.5,
                 learning_rate=0.1, anything=(), *, required):
        pass


def checked(**arguments):
    check("thing", Component, {"required": 1, **arguments}, label="thing 'component'")


@pytest.mark.parametrize(
    "arguments",
    [{}, {"count": 7}, {"count": numpy.int64(2)}, {"scale": 2}, {"scale": 0.25}, {"verbose": True},
     {"label": None}, {"label": "x"}, {"size": "small"}, {"ratio": 1}, {"learning_rate": 0}, {"anything": "x"}],
)
def test_values_of_the_declared_type_and_range_pass(arguments):
    checked(**arguments)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"count": 2.7}, "thing.count: expected an integer, got 2.7"),  # an int default: never truncated
        ({"count": True}, "thing.count: expected an integer, got True"),
        ({"scale": "1"}, "thing.scale: expected a finite number, got '1'"),
        ({"scale": float("inf")}, "thing.scale: expected a finite number, got inf"),
        ({"verbose": 1}, "thing.verbose: expected true or false, got 1"),
        ({"label": 3}, "thing.label: expected a string, got 3"),  # from the annotation
        ({"ratio": 0}, r"thing.ratio: expected a finite number in (0, 1], got 0"),  # declared by the component
        ({"learning_rate": -1}, "thing.learning_rate: expected a finite number >= 0, got -1"),  # a convention
        ({"cuont": 1}, "unknown key thing.cuont for thing 'component'; allowed: count, scale"),
    ],
)
def test_a_value_of_another_type_or_out_of_range_names_its_key(arguments, message):
    with pytest.raises(ConfigError) as caught:
        checked(**arguments)
    assert message in str(caught.value)


def test_missing_skipped_given_and_open_ended_parameters():
    with pytest.raises(ConfigError, match="thing.required is required for thing 'component'"):
        check("thing", Component, {}, label="thing 'component'")

    def layer(name, input_shapes, *, size, **extra):
        pass

    check("layer", layer, {"size": 2, "whatever": "goes"}, label="layer", skip=2)  # **extra takes unknown keys
    with pytest.raises(ConfigError, match="layer.size: expected an integer >= 1, got 0"):
        check("layer", layer, {"size": 0}, label="layer", skip=2)
    with pytest.raises(ConfigError, match="unknown key hook.every for hook; allowed: type, count"):
        check("hook", lambda count=1, every=None: None, {"every": 1}, label="hook", given=("every",), shared=("type",))


def test_a_plugin_component_built_by_name_goes_through_the_same_check(fake_site):
    fake_site.add(
        "ruled-plugin",
        entry_points={"ruled": "ruled_mod"},
        modules={
            "ruled_mod": """
                from sigma_core.hookspecs import hookimpl

                class Ruled:
                    argument_rules = {"rate": "number in (0, 1]"}

                    def __init__(self, rate=0.5, every=2):
                        self.rate, self.every = rate, every

                @hookimpl
                def register_hooks(register):
                    register("ruled", Ruled)
            """
        },
    )
    assert plugins.build("hook", {"type": "ruled", "rate": 1}).rate == 1
    with pytest.raises(ConfigError, match=r"hooks\[0\].rate: expected a finite number in \(0, 1\], got 1.5"):
        plugins.build("hook", {"type": "ruled", "rate": 1.5}, where="hooks[0]")
    with pytest.raises(ConfigError, match=r"hooks\[0\].every: expected an integer, got 2.5"):
        plugins.build("hook", {"type": "ruled", "every": 2.5}, where="hooks[0]")

"""Handler selection: name precedence, ``auto`` ranking and errors."""

from __future__ import annotations

import logging

import pytest

from sigma_core.compute import backend
from sigma_core.errors import HandlerUnavailableError, UnknownComponentError

# Fake handlers: ``gpu`` ranks highest but its registry check fails; ``picky``
# passes the registry check but its class says no; ``fast`` and ``twin`` tie.
FAKE_HANDLERS = """
    from sigma_core.hookspecs import hookimpl

    class FakeHandler:
        name = "fake"

        def __init__(self, dtype="float32", seed=None):
            self.dtype, self.seed = dtype, seed

    class Fast(FakeHandler):
        name = "fast"

    class Twin(FakeHandler):
        name = "twin"

    class Slow(FakeHandler):
        name = "slow"

    class Picky(FakeHandler):
        name = "picky"

        @classmethod
        def availability(cls):
            return False, "needs AVX-512"

    @hookimpl
    def register_handlers(register):
        register("gpu", "fake_gpu_mod:Gpu", rank=100, check=lambda: (False, "no CUDA device"))
        register("picky", Picky, rank=50)
        register("twin", Twin, rank=10)
        register("fast", Fast, rank=10)
        register("slow", Slow, rank=-5)
"""


@pytest.fixture
def fake_handlers(fake_site, monkeypatch):
    fake_site.add(
        "fake-handlers",
        entry_points={"handlers": "fake_handlers_mod"},
        modules={"fake_handlers_mod": FAKE_HANDLERS},
    )
    monkeypatch.setenv("SIGMA_PLUGINS", "fake-handlers")  # keep real installed backends out of the ranking
    return fake_site


@pytest.mark.parametrize(
    ("cli", "env", "config", "expected"),
    [
        ("slow", "fast", "twin", ("slow", "--handler")),
        (None, "fast", "twin", ("fast", "SIGMA_HANDLER")),
        (None, None, "twin", ("twin", "config")),
        (None, None, None, ("auto", "default")),
        ("", " ", "twin", ("twin", "config")),  # empty counts as unset
    ],
)
def test_handler_name_precedence(monkeypatch, cli, env, config, expected):
    if env is not None:
        monkeypatch.setenv("SIGMA_HANDLER", env)
    assert backend.resolve_handler_name(cli=cli, config=config) == expected


def test_auto_picks_the_highest_ranked_available_handler_and_logs_why(fake_handlers, caplog):
    with caplog.at_level(logging.INFO, logger="sigma"):
        handler = backend.create_handler("auto", source="SIGMA_HANDLER")
    # gpu (100) fails its check, picky (50) its class; fast and twin tie at 10: name order.
    assert handler.name == "fast"
    assert "handler auto -> fast (fastest available; from SIGMA_HANDLER)" in caplog.messages


def test_named_handler_is_built_with_dtype_and_seed(fake_handlers, caplog):
    with caplog.at_level(logging.INFO, logger="sigma"):
        handler = backend.create_handler("slow", dtype="float64", seed=7, source="--handler")
    assert (handler.name, handler.dtype, handler.seed) == ("slow", "float64", 7)
    assert "handler slow (from --handler)" in caplog.messages


def test_unknown_handler_lists_the_registered_ones(fake_handlers):
    with pytest.raises(UnknownComponentError) as caught:
        backend.create_handler("quantum")
    assert str(caught.value) == ("unknown handler 'quantum' (available: fast, gpu, numpy, picky, slow, twin); "
                                 "docs/distributions.md lists the plugins that provide more")


@pytest.mark.parametrize(
    ("name", "reason"),
    [("gpu", "no CUDA device"), ("picky", "needs AVX-512")],
)
def test_unavailable_handler_says_why_and_what_can_run(fake_handlers, name, reason):
    with pytest.raises(HandlerUnavailableError) as caught:
        backend.create_handler(name)
    message = str(caught.value)
    assert message == f"handler {name!r} cannot run here: {reason} (available: fast, numpy, slow, twin)"
    assert "\n" not in message


def test_unavailable_check_means_the_lazy_implementation_is_never_imported(fake_handlers):
    # fake_gpu_mod does not even exist: the failing check must stop before importing it.
    with pytest.raises(HandlerUnavailableError, match="no CUDA device"):
        backend.create_handler("gpu")


def test_auto_without_plugins_builds_the_numpy_handler(monkeypatch):
    monkeypatch.setenv("SIGMA_PLUGINS", "")
    handler = backend.create_handler("auto", seed=0)
    assert (type(handler).__name__, handler.name, handler.dtype) == ("NumpyHandler", "numpy", "float32")

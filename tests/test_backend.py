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

    class Wrapper(FakeHandler):
        name = "wrapper"

        @classmethod
        def around(cls, handler):
            handler.wrapped_by = cls.name
            return handler

    @hookimpl
    def register_handlers(register):
        register("wrapper", Wrapper, rank=1000)  # ranked first, yet never auto's pick: it wraps one
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
    ("given", "env", "expected"),
    [("slow", "fast", "slow"), (None, "fast", "fast"), (None, None, "fast"), ("", " ", "fast"), (" slow ", None, "slow")],
)
def test_a_handler_not_named_is_sigma_handler_else_auto(fake_handlers, monkeypatch, given, env, expected):
    """Networks loaded without a run file (``load``, ``sigma predict``, ``sigma sample``) name no handler of their
    own: the environment's, else the best available (``fast``, in this fake set)."""
    if env is not None:
        monkeypatch.setenv("SIGMA_HANDLER", env)
    assert backend.create_handler(given).name == expected


@pytest.mark.parametrize(
    ("flag", "env", "sets", "expected"),
    [
        ("slow", "fast", ["handler.name=twin"], "slow"),  # --handler over everything
        (None, "fast", ["handler.name=twin"], "twin"),  # --set over the environment
        (None, "fast", [], "fast"),  # the environment over the run file
        (None, None, [], "numpy"),  # the run file
        (None, " ", [], "numpy"),  # empty counts as unset
    ],
)
def test_handler_and_sigma_handler_are_run_file_overrides_the_command_line_winning(monkeypatch, tmp_path, flag, env,
                                                                                  sets, expected):
    from argparse import Namespace

    from sigma_core import config
    from sigma_core.cli.options import run_overrides

    monkeypatch.delenv("SIGMA_HANDLER", raising=False)
    if env is not None:
        monkeypatch.setenv("SIGMA_HANDLER", env)
    run_file = tmp_path / "run.toml"
    run_file.write_text('name = "n"\n[handler]\nname = "numpy"\n[data]\nextractor = "digits"\n'
                        '[network]\nlayers = [{type = "input", shape = 4}, {type = "output", size = 2}]\n')
    args = Namespace(handler=flag, dtype="float64", overrides=sets)
    loaded = config.load(run_file, run_overrides(args))["handler"]
    assert loaded == {"name": expected, "dtype": "float64"}


def test_auto_picks_the_highest_ranked_available_handler_and_logs_why(fake_handlers, caplog):
    with caplog.at_level(logging.INFO, logger="sigma"):
        handler = backend.create_handler("auto")
    # gpu (100) fails its check, picky (50) its class; fast and twin tie at 10: name order.
    assert handler.name == "fast"
    assert "handler auto -> fast (fastest available)" in caplog.messages


def test_named_handler_is_built_with_dtype_and_seed(fake_handlers, caplog):
    with caplog.at_level(logging.INFO, logger="sigma"):
        handler = backend.create_handler("slow", dtype="float64", seed=7)
    assert (handler.name, handler.dtype, handler.seed) == ("slow", "float64", 7)
    assert "handler slow" in caplog.messages


def test_unknown_handler_lists_the_registered_ones(fake_handlers):
    with pytest.raises(UnknownComponentError) as caught:
        backend.create_handler("quantum")
    assert str(caught.value) == ("unknown handler 'quantum' (available: fast, gpu, numpy, picky, slow, twin, wrapper); "
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


def test_a_wrapping_handler_wraps_the_one_named_after_its_colon_and_is_never_autos_pick(fake_handlers):
    assert "wrapper" not in backend.available_handlers()
    assert backend.create_handler("auto").name == "fast"
    wrapped = backend.create_handler("wrapper:slow", dtype="float64")
    assert (wrapped.name, wrapped.dtype, wrapped.wrapped_by) == ("slow", "float64", "wrapper")

"""The component registry: built-ins, external plugins, failures, allowlist, clashes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from sigma_core import plugins
from sigma_core.errors import (
    ComponentClashError,
    ComponentLoadError,
    PluginError,
    SigmaError,
    UnknownComponentError,
)


def test_builtin_numpy_handler_is_registered_available_and_attributed_to_sigmann():
    numpy_handler = plugins.get("handler", "numpy")
    assert numpy_handler.distribution == "sigmann"
    assert numpy_handler.version == metadata.version("sigmann")
    assert numpy_handler.implementation == "sigma_core.compute.handler:NumpyHandler"
    assert numpy_handler.availability() == (True, "")
    assert numpy_handler in plugins.components("handler")


def test_builtins_load_even_when_plugins_are_disabled(monkeypatch):
    monkeypatch.setenv("SIGMA_PLUGINS", "")
    assert {c.distribution for c in plugins.components()} == {"sigmann"}
    assert plugins.failures() == []


def test_good_plugin_loads_while_broken_one_is_recorded(good_and_broken):
    swish = plugins.get("activation", "fake_swish")
    assert (swish.distribution, swish.version) == ("good-plugin", "0.1")
    assert swish.load().__name__ == "Swish"
    assert plugins.get("activation", "fake_silu") is swish  # aliases resolve to the component

    [failure] = [f for f in plugins.failures() if f.distribution == "broken-plugin"]
    assert (failure.name, failure.version) == ("broken", "0.1")
    assert failure.error == "RuntimeError: broken on purpose"


def test_strict_mode_turns_a_plugin_failure_into_plugin_error(good_and_broken, monkeypatch):
    monkeypatch.setenv("SIGMA_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=r"plugin 'broken' \(broken-plugin 0.1\).*RuntimeError: broken on purpose"):
        plugins.components()


def test_a_hook_that_raises_or_registers_garbage_is_a_failure_of_that_plugin(fake_site):
    fake_site.add(
        "sloppy-plugin",
        entry_points={"sloppy": "sloppy_mod"},
        modules={
            "sloppy_mod": """
                from sigma_core.hookspecs import hookimpl

                @hookimpl
                def register_layers(register):
                    register("fine", object)
                    register("bad", "no_colon_here")
            """
        },
    )
    [failure] = [f for f in plugins.failures() if f.name == "sloppy"]
    assert "no_colon_here" in failure.error
    # Nothing from a failed plugin is half-registered.
    assert "fine" not in [c.name for c in plugins.components("layer")]


def test_a_misspelt_hook_name_is_reported(fake_site):
    fake_site.add(
        "typo-plugin",
        entry_points={"typo": "typo_mod"},
        modules={
            "typo_mod": """
                from sigma_core.hookspecs import hookimpl

                @hookimpl
                def register_layer(register):
                    register("dense", object)
            """
        },
    )
    [failure] = [f for f in plugins.failures() if f.name == "typo"]
    assert "register_layer" in failure.error


@pytest.mark.parametrize(
    ("allowlist", "loaded"),
    [
        (None, {"good", "broken"}),  # unset: everything
        ("good", {"good"}),  # an entry-point name
        ("Broken_Plugin", {"broken"}),  # a distribution name, normalised
        ("good, broken-plugin", {"good", "broken"}),
        ("", set()),  # set but empty: built-ins only
    ],
)
def test_sigma_plugins_allowlist(good_and_broken, monkeypatch, allowlist, loaded):
    if allowlist is not None:
        monkeypatch.setenv("SIGMA_PLUGINS", allowlist)
    # What each fake plugin leaves behind: a component, or a recorded failure.
    trace = {"good": "fake_swish", "broken": "broken"}
    seen = {c.name for c in plugins.components("activation")} | {f.name for f in plugins.failures()}
    assert seen & set(trace.values()) == {trace[name] for name in loaded}
    assert plugins.get("handler", "numpy").distribution == "sigmann"


def test_discovery_is_cached_until_reset(good_and_broken, monkeypatch):
    assert "fake_swish" in {c.name for c in plugins.components("activation")}
    monkeypatch.setenv("SIGMA_PLUGINS", "")
    assert "fake_swish" in {c.name for c in plugins.components("activation")}
    plugins.reset()
    assert "fake_swish" not in {c.name for c in plugins.components("activation")}


def _layer_plugin(name: str) -> str:
    return f"""
        from sigma_core.hookspecs import hookimpl

        @hookimpl
        def register_layers(register):
            register("{name}", object)
    """


def test_a_name_clash_between_distributions_names_both(fake_site):
    fake_site.add("alpha-layers", entry_points={"alpha": "alpha_mod"}, modules={"alpha_mod": _layer_plugin("fake_dense")})
    fake_site.add("beta-layers", entry_points={"beta": "beta_mod"}, modules={"beta_mod": _layer_plugin("fake_dense")})
    with pytest.raises(ComponentClashError, match="layer 'fake_dense' is registered by both alpha-layers and beta-layers"):
        plugins.components()


def test_an_alias_clashing_with_a_builtin_name_is_a_clash(fake_site):
    fake_site.add(
        "rival",
        entry_points={"rival": "rival_mod"},
        modules={
            "rival_mod": """
                from sigma_core.hookspecs import hookimpl

                @hookimpl
                def register_handlers(register):
                    register("fastnumpy", object, aliases=["numpy"])
            """
        },
    )
    with pytest.raises(ComponentClashError, match="handler 'numpy' is registered by both sigmann and rival"):
        plugins.components()


def test_a_lazy_implementation_is_imported_only_on_load(fake_site):
    fake_site.add(
        "lazy-plugin",
        entry_points={"lazy": "lazy_plugin_mod"},
        modules={
            "lazy_plugin_mod": """
                from sigma_core.hookspecs import hookimpl

                @hookimpl
                def register_optimisers(register):
                    register("lazyopt", "lazy_implementation_mod:Optimiser")
                    register("missing", "lazy_implementation_mod:Nope")
            """,
            "lazy_implementation_mod": "class Optimiser:\n    pass\n",
        },
    )
    component = plugins.get("optimiser", "lazyopt")
    assert "lazy_implementation_mod" not in sys.modules
    assert component.load().__name__ == "Optimiser"
    assert "lazy_implementation_mod" in sys.modules

    with pytest.raises(ComponentLoadError, match=r"optimiser 'missing' from lazy-plugin 0.1 .*AttributeError"):
        plugins.load("optimiser", "missing")


def test_check_reports_unavailability_and_a_raising_check_is_unavailable(fake_site):
    fake_site.add(
        "checked-plugin",
        entry_points={"checked": "checked_mod"},
        modules={
            "checked_mod": """
                from sigma_core.hookspecs import hookimpl

                def boom():
                    raise OSError("driver missing")

                @hookimpl
                def register_hooks(register):
                    register("never", object, check=lambda: (False, "no display"))
                    register("broken", object, check=boom)
            """
        },
    )
    assert plugins.get("hook", "never").availability() == (False, "no display")
    assert plugins.get("hook", "broken").availability() == (False, "check failed: OSError: driver missing")


def test_unknown_component_lists_the_names_of_that_kind():
    with pytest.raises(UnknownComponentError) as caught:
        plugins.get("handler", "numpyy")
    message = str(caught.value)
    assert message.startswith("unknown handler 'numpyy' (did you mean 'numpy'? available: ")
    available, _, hint = message.rpartition("available: ")[2].partition(")")
    assert "numpy" in available.split(", ") and "docs/distributions.md" in hint  # the core names no plugin distribution itself
    assert isinstance(caught.value, SigmaError)


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown component kind 'layers'"):
        plugins.components("layers")


def test_discovery_imports_no_heavy_gpu_or_jit_modules():
    code = (
        "import sys, sigma_core, sigma_core.plugins\n"
        "sigma_core.plugins.components()\n"
        "print(sorted(m for m in ('numba', 'cupy') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# --- containment, clean stdout and load times (issue 10 item 14) ----------------------------


def _register_swish(name: str) -> str:
    return f"""
        from sigma_core.hookspecs import hookimpl

        @hookimpl
        def register_activations(register):
            register("{name}", object)
    """


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("import sys\nsys.exit(3)", "SystemExit: 3"),
        ("class Weird(BaseException):\n    pass\nraise Weird('not an Exception')", "Weird: not an Exception"),
    ],
)
def test_a_plugin_that_exits_or_raises_a_base_exception_at_import_is_contained(fake_site, body, error):
    fake_site.add("exiting-plugin", entry_points={"exiting": "exiting_mod"}, modules={"exiting_mod": body})
    fake_site.add("fine-plugin", entry_points={"fine": "fine_mod"}, modules={"fine_mod": _register_swish("fine_swish")})
    assert plugins.get("activation", "fine_swish").distribution == "fine-plugin"
    [failure] = [f for f in plugins.failures() if f.name == "exiting"]
    assert failure.error == error


def test_keyboard_interrupt_during_discovery_is_not_swallowed(fake_site):
    fake_site.add("ctrl-c-plugin", entry_points={"ctrl_c": "ctrl_c_mod"}, modules={"ctrl_c_mod": "raise KeyboardInterrupt"})
    with pytest.raises(KeyboardInterrupt):
        plugins.components()


def test_a_plugin_that_prints_does_not_corrupt_plugins_json(fake_site, capsys):
    from sigma_core import cli

    fake_site.add(
        "chatty-plugin",
        entry_points={"chatty": "chatty_mod"},
        modules={
            "chatty_mod": """
                from sigma_core.hookspecs import hookimpl
                print("hello from chatty at import")

                def check():
                    print("hello from chatty's check")
                    return True, ""

                @hookimpl
                def register_activations(register):
                    print("hello from chatty's hook")
                    register("chatty_swish", object, check=check)
            """
        },
    )
    assert cli.main(["plugins", "--json"]) == 0
    out, err = capsys.readouterr()
    entries = json.loads(out)  # nothing but the listing on stdout
    assert any(entry["name"] == "chatty_swish" for entry in entries)
    for said in ("hello from chatty at import", "hello from chatty's check", "hello from chatty's hook"):
        assert said in err


def test_a_slow_plugin_is_named_with_its_load_time_and_debug_logs_every_load_time(fake_site, capsys):
    from sigma_core import cli

    fake_site.add("slow-plugin", entry_points={"slow": "slow_mod"},
                  modules={"slow_mod": "import time\ntime.sleep(0.6)\n" + textwrap.dedent(_register_swish("slow_swish"))})
    fake_site.add("quick-plugin", entry_points={"quick": "quick_mod"}, modules={"quick_mod": _register_swish("quick_swish")})
    assert plugins.load_seconds()["slow-plugin"] >= 0.6
    assert plugins.load_seconds()["quick-plugin"] < 0.5

    sys.modules.pop("slow_mod")  # imported again: slow again
    plugins.reset()
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out.splitlines()
    position = out.index("1 plugin distribution(s) slow to load (every sigma command waits for them):")
    assert re.fullmatch(r"  slow-plugin: 0\.[6-9] s|  slow-plugin: [1-9]\.\d s", out[position + 1])

    sys.modules.pop("slow_mod")
    plugins.reset()
    assert cli.main(["--debug", "plugins", "--json"]) == 0
    captured = capsys.readouterr()
    for name, distribution in (("slow", "slow-plugin"), ("quick", "quick-plugin")):
        assert re.search(rf"plugin '{name}' \({distribution} 0.1\) took \d+\.\d{{3}} s to load", captured.err)
    slow = next(entry for entry in json.loads(captured.out) if entry["name"] == "slow_swish")
    assert slow["load_seconds"] >= 0.6

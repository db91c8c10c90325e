"""Shared fixtures: a clean plugin registry per test, and fake installed plugins."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from sigma_core import plugins
from sigmann_testing.plugin import BLOBS_RUN_FILE  # the tiny "blobs" run the hook and metrics tests start from

PLUGIN_ENV_VARS = ("SIGMA_PLUGINS", "SIGMA_STRICT_PLUGINS", "SIGMA_HANDLER")


@pytest.fixture(autouse=True)
def clean_plugin_state(monkeypatch):
    """Each test starts from the real installed plugins."""
    for var in PLUGIN_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    plugins.reset()
    yield
    plugins.reset()


class FakeSite:
    """A directory on ``sys.path`` holding fake installed distributions.

    ``add`` writes a ``*.dist-info`` with ``entry_points.txt`` (group
    ``sigma``) and the plugin's modules, which is all
    ``importlib.metadata.entry_points`` needs to find them.
    """

    def __init__(self, root: Path):
        self.root = root
        self.modules: set[str] = set()

    def add(self, distribution: str, *, entry_points: dict[str, str], modules: dict[str, str], version: str = "0.1"):
        info = self.root / f"{distribution.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[sigma]\n{lines}")
        for module, source in modules.items():
            (self.root / f"{module}.py").write_text(textwrap.dedent(source))
            self.modules.add(module)

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        """An environment in which a child Python sees these fake distributions."""
        env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV_VARS}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root), env.get("PYTHONPATH")]))
        env.update(extra)
        return env


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    site = FakeSite(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.reset()
    yield site
    for module in site.modules:  # the next test's fake module of the same name must be re-imported
        sys.modules.pop(module, None)


GOOD_PLUGIN = """
    from sigma_core.hookspecs import hookimpl

    class Swish:
        pass

    @hookimpl
    def register_activations(register):
        register("fake_swish", Swish, aliases=("fake_silu",), description="x * sigmoid(x)")
"""

BROKEN_PLUGIN = """
    raise RuntimeError("broken on purpose")
"""


@pytest.fixture
def good_and_broken(fake_site):
    """One plugin that works and one whose module raises on import."""
    fake_site.add("good-plugin", entry_points={"good": "good_plugin_mod"}, modules={"good_plugin_mod": GOOD_PLUGIN})
    fake_site.add("broken-plugin", entry_points={"broken": "broken_plugin_mod"}, modules={"broken_plugin_mod": BROKEN_PLUGIN})
    return fake_site


@pytest.fixture
def run_file(tmp_path):
    """The blobs run file in a fresh directory; tests append tables to it."""
    path = tmp_path / "run.toml"
    path.write_text(BLOBS_RUN_FILE)
    return path


@pytest.fixture
def python_ctrl_c():
    """Python's own SIGINT handler for the test, as an interactive shell leaves it: under ``nohup`` or ``&`` SIGINT
    is ignored, and a KeyboardInterrupt could then never be the user's Ctrl-C."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)

"""What the kit's tests share: installing a one-module op distribution for plugin discovery to find."""

from __future__ import annotations

import sys

import pytest

from sigma_core.plugins import reset


@pytest.fixture
def install_ops(tmp_path, monkeypatch):
    """``install_ops(source)``: the module ``source`` installed as the distribution ``kit-ops`` (and no other
    distribution seen), found by plugin discovery as any distribution's are; the module is returned."""
    def install(source):
        info = tmp_path / "kit_ops-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kit-ops\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[sigma]\nkit_ops = kit_ops_mod\n")
        (tmp_path / "kit_ops_mod.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("SIGMA_PLUGINS", "kit-ops")
        reset()
        return __import__("kit_ops_mod")

    yield install
    reset()
    sys.modules.pop("kit_ops_mod", None)

"""``sigma plugins`` tells the truth about sigmann-images: available with Pillow importable, and only without it
"unavailable — Pillow is not installed" (it once said "available — Pillow is not installed")."""

from __future__ import annotations

import importlib.util
import json

import pytest

from sigma_core import plugins
from sigma_core.cli import main

COMPONENTS = [("extractor", "image_folder"), ("reader", "png")]


def listing(capsys, *options):
    plugins.reset()  # the checks run again, under this test's patches
    assert main(["plugins", *options]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("pillow", [True, False], ids=["with Pillow", "without Pillow"])
def test_the_listing_says_whether_pillow_is_there(capsys, monkeypatch, pillow):
    find_spec = importlib.util.find_spec
    if not pillow:
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "PIL" else find_spec(name, *a))
    assert (find_spec("PIL") is not None) is True  # installed here: the [test] environment has Pillow
    rows = {(row["kind"], row["name"]): row for row in json.loads(listing(capsys, "--json"))}
    assert [(rows[c]["available"], rows[c]["reason"]) for c in COMPONENTS] == [
        (True, "") if pillow else (False, "Pillow is not installed")] * 2
    lines = [line for line in listing(capsys).splitlines() if tuple(line.split()[:2]) in COMPONENTS]
    assert len(lines) == 2 and all(line.endswith("  available" if pillow else
                                                 "  unavailable — Pillow is not installed") for line in lines)

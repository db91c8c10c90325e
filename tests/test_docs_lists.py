"""The README's list of distributions and docs/distributions.md name every distribution of this repository.

The core's "not installed" messages send users to docs/distributions.md, and the README is where they look first:
a distribution left out of either (sigmann-vision once was) is a feature nobody finds.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_and_the_distributions_page_name_every_distribution():
    projects = [ROOT / "pyproject.toml", *ROOT.glob("sigma_*/pyproject.toml"), *ROOT.glob("plugins/*/pyproject.toml")]
    names = [tomllib.loads(path.read_text())["project"]["name"] for path in projects]
    for page in (ROOT / "README.md", ROOT / "docs" / "distributions.md"):
        text = page.read_text()
        assert not [name for name in names if f"`{name}`" not in text], f"{page.name} leaves out distributions"

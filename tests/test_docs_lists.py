"""The README's list of distributions and docs/distributions.md name every distribution of this repository.

The core's "not installed" messages send users to docs/distributions.md, and the README is where they look first:
a distribution left out of either (sigmann-vision once was) is a feature nobody finds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def repository():
    """tests/test_install_lines.py, whose ``distributions()`` reads this repository's distributions (test modules
    are imported by path here: pytest's importlib mode puts no test folder on sys.path)."""
    spec = importlib.util.spec_from_file_location("install_lines", Path(__file__).with_name("test_install_lines.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_and_the_distributions_page_name_every_distribution():
    install_lines = repository()
    names = [project["name"] for _, project in install_lines.distributions().values()]
    for page in (install_lines.ROOT / "README.md", install_lines.ROOT / "docs" / "distributions.md"):
        text = page.read_text()
        assert not [name for name in names if f"`{name}`" not in text], f"{page.name} leaves out distributions"

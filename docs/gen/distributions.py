"""Writes distributions/<name>.md, a page per distribution of this repository: its README, then its components.

The components are what ``sigma plugins --json`` lists for the distribution, each shown as ``sigma help KIND NAME``
shows it (``sigmann_help.show.component_help``: origin, documentation, run-file arguments with their rules and
defaults), so the page says what the installed code declares. CI builds the site with every distribution of
this repository installed (requirements-dev.txt); a distribution of this repository that registers nothing
there still gets its README.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import mkdocs_gen_files

from sigma_core import get_component
from sigmann_help.show import component_help

ROOT = Path(__file__).resolve().parents[2]

#: What a README's links to the repository's top-level files mean on the site.
SITE_LINKS = {"../../BENCHMARKS.md": "../performance.md", "../../README.md": "../index.md",
              "../../docs/plugins.md": "../plugins.md", "../../docs/ops.md": "../ops.md"}


def distributions() -> dict[str, tuple[Path, dict]]:
    """Name -> (folder, [project]) of every distribution in this repository."""
    found = {}
    for pyproject in [ROOT / "pyproject.toml", *sorted(ROOT.glob("sigma_*/pyproject.toml")),
                      *sorted(ROOT.glob("plugins/*/pyproject.toml"))]:
        project = tomllib.loads(pyproject.read_text())["project"]
        found[project["name"]] = (pyproject.parent, project)
    return found


def listed() -> list[dict]:
    """``sigma plugins --json``: every registered component and every plugin that failed to load."""
    done = subprocess.run([sys.executable, "-m", "sigma_core", "plugins", "--json"], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def readme(folder: Path) -> str:
    """The distribution's README with its links made the site's (headings kept: its title is the page's). The
    core's README is the repository's front page, which the site's home page stands for."""
    path = folder / "README.md"
    if folder == ROOT or not path.is_file():
        return ""
    text = path.read_text()
    for link, target in SITE_LINKS.items():
        text = text.replace(f"]({link}", f"]({target}")
    return re.sub(r"\]\(\.\./(sigmann-[a-z]+)/?(?:README\.md)?\)", r"](\1.md)", text)


def component_section(row: dict) -> list[str]:
    aliases = f" ({', '.join(row['aliases'])})" if row["aliases"] else ""
    lines = [f"### {row['kind']} `{row['name']}`{aliases}", ""]
    if row["kind"] == "plugin-failure":
        return lines + [f"Failed to load here: {row['reason']}", ""]
    try:
        shown = component_help(get_component(row["kind"], row["name"]))
    except Exception as error:  # its implementation cannot load here (a GPU handler without CuPy)
        shown = f"{row['description']}\n\n(not loadable where this site was built: {error})"
    return lines + ["```text", shown, "```", ""]


def render(name: str, folder: Path, project: dict, rows: list[dict]) -> str:
    text = readme(folder) or f"# {name}\n\n{project.get('description', '')}\n"
    lines = [text.rstrip(), "", "## Components", ""]
    if not rows:
        return "\n".join(lines + ["It registers no component where this site was built.", ""])
    lines += [f"What `{name}` registers, as `sigma help KIND NAME` shows each:", ""]
    for row in rows:
        lines += component_section(row)
    return "\n".join(lines)


by_distribution = defaultdict(list)
for row in listed():
    by_distribution[row["distribution"]].append(row)
for name, (folder, project) in distributions().items():
    with mkdocs_gen_files.open(f"distributions/{name}.md", "w") as page:
        page.write(render(name, folder, project, by_distribution[name]))

"""Every install line in the documentation works as written from a fresh clone, in a fresh venv.

None of Sigma's distributions is on PyPI, so pip can only find one this repository holds when the command names it
as a path. The rule, everywhere (README, docs/, the run files' comments, every distribution's README): an install
line names, as paths in the clone, every distribution of this repository it needs, the core (``.``) included, and
those its extras need, transitively. pip resolves the rest (numpy, numba, ...) from the package index as usual.
Plain pip, no build step, no tool to learn, and each line can be copied alone.

This test checks the rule statically, from each distribution's pyproject.toml. ``.ci/run`` also runs the longest
line for real in a fresh venv (``python tests/test_install_lines.py --longest`` prints its arguments).
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

#: Where install lines are written for users.
DOCUMENTS = ["README.md", "docs/**/*.md", "examples/*.toml", "plugins/*/README.md", "sigma_cpu/*.md",
             "sigma_cuda/*.md"]

#: A distribution of the reader's own, outside the clone: written by ``sigma plugin new`` or copied from
#: docs/plugins.md, both with the scaffold's pyproject (``sigmann``, and ``sigmann-testing`` for tests).
OWN_PLUGIN = {"dependencies": ["sigmann"], "optional-dependencies": {"test": ["sigmann-testing"]}}

#: ``pip install`` and its arguments, up to whatever ends a command in prose, a comment or a shell line.
COMMAND = re.compile(r"pip install\b([^`\n#)&;]*)")


def distributions() -> dict[str, tuple[str, dict]]:
    """Every distribution of this repository: canonical name -> (path as a command names it, its [project])."""
    found, folders = {}, [ROOT, *ROOT.glob("sigma_*"), *ROOT.glob("plugins/*")]
    for pyproject in [folder / "pyproject.toml" for folder in folders if (folder / "pyproject.toml").is_file()]:
        project = tomllib.loads(pyproject.read_text())["project"]
        where = pyproject.parent.relative_to(ROOT).as_posix()
        found[canonicalize_name(project["name"])] = ("." if where == "." else f"./{where}", project)
    return found


def install_lines() -> list[tuple[str, str]]:
    """(where, arguments) of every ``pip install`` a user is told to run. Program output quoted in the documents
    (an ``error:`` line naming what to install) is not a command."""
    lines = []
    for pattern in DOCUMENTS:
        for path in sorted(ROOT.glob(pattern)):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if line.lstrip().startswith("error:"):
                    continue
                for arguments in COMMAND.findall(line):
                    lines.append((f"{path.relative_to(ROOT)}:{number}", arguments.strip()))
    return lines


def requirements(arguments: str) -> list[str]:
    """The requirements a ``pip install`` argument list names (``-r FILE`` read in place; options left out)."""
    words, found = shlex.split(arguments), []
    while words:
        word = words.pop(0)
        if word == "-r":
            lines = (ROOT / words.pop(0)).read_text().splitlines()
            words = [w for line in lines for w in shlex.split(line, comments=True)] + words
        elif not word.startswith("-"):
            found.append(word)
    return found


def named(requirement: str, repository: dict) -> tuple[str | None, dict, set[str]]:
    """(canonical name or None for a package index name, its [project], extras) of one requirement."""
    path, _, extras = requirement.partition("[")
    extras = set(extras.rstrip("]").split(",")) - {""}
    if "/" not in path and path != ".":
        return None, {}, extras
    for name, (where, project) in repository.items():
        if Path(where) == Path(path):
            return name, project, extras
    assert not (ROOT / path).exists(), f"{path} holds no distribution"
    return canonicalize_name(Path(path).name), OWN_PLUGIN, extras


def needed(project: dict, extras: set[str], repository: dict) -> set[str]:
    """The distributions of this repository ``project`` with ``extras`` needs, transitively."""
    found, todo = set(), [(project, extras)]
    while todo:
        project, extras = todo.pop()
        specs = list(project.get("dependencies", []))
        for extra in extras:
            specs += project.get("optional-dependencies", {}).get(extra, [])
        for spec in map(Requirement, specs):
            name = canonicalize_name(spec.name)
            if name in repository and (name, frozenset(spec.extras)) not in found:
                found.add((name, frozenset(spec.extras)))
                todo.append((repository[name][1], set(spec.extras)))
    return {name for name, _ in found}


def missing(arguments: str, repository: dict) -> list[str]:
    """What a line leaves out: each distribution of this repository it needs and names by neither path nor line,
    and each one it asks for by name (pip would look for it on the package index)."""
    given, wanted, problems = set(), set(), [] if requirements(arguments) else ["names nothing: cut by a line break?"]
    for requirement in requirements(arguments):
        name, project, extras = named(requirement, repository)
        if name is None:
            index_name = canonicalize_name(Requirement(requirement).name)
            if index_name in repository:
                problems.append(f"{requirement} by name: pip looks for it on the package index; name its path, "
                                f"{repository[index_name][0]}")
            continue
        given.add(name)
        wanted |= needed(project, extras, repository)
    problems += [f"needs {repository[name][0]} ({name})" for name in sorted(wanted - given)]
    return problems


def longest(lines, repository) -> str:
    """The line that installs the most distributions of this repository (not a requirements file: CI installs
    requirements-dev.txt already)."""
    candidates = [arguments for _, arguments in lines if "-r" not in shlex.split(arguments)]
    return max(candidates, key=lambda a: (sum(named(r, repository)[0] is not None for r in requirements(a)), len(a)))


def test_every_install_line_names_each_local_distribution_it_needs():
    repository, lines = distributions(), install_lines()
    assert len(lines) >= 30, "the install lines were not found"
    problems = [f"{where}: pip install {arguments}: {problem}" for where, arguments in lines
                for problem in missing(arguments, repository)]
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_missing_dependency():
    repository = distributions()
    assert missing("./plugins/sigmann-mnist ./plugins/sigmann-vision", repository) == [
        "needs . (sigmann)", "needs ./plugins/sigmann-data (sigmann-data)"]
    assert missing(". ./plugins/sigmann-data './plugins/sigmann-mnist[test]'", repository) == [
        "needs ./plugins/sigmann-help (sigmann-help)", "needs ./plugins/sigmann-testing (sigmann-testing)"]
    assert missing("'sigmann-cuda[cuda12]'", repository)[0].startswith("sigmann-cuda[cuda12] by name")
    assert missing("-r requirements-dev.txt", repository) == []


if __name__ == "__main__" and sys.argv[1:] == ["--longest"]:
    print(longest(install_lines(), distributions()))

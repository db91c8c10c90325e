"""Which runs a path names, for the commands that read metrics files (``sigma plot``, ``sigma dashboard``).

The core makes each run's directory (``runs/<name>/version_N``, :func:`sigma_core.run_versions`); the metrics hook
writes ``metrics.jsonl`` there, so finding the runs that have one, and naming them in legends and tabs, is the
business of this distribution's readers, not of the core.
"""

from pathlib import Path

from sigma_core import run_versions


def run_directories(path) -> list[Path]:
    """The runs ``path`` names: the run directory (or metrics file) itself, or, for a folder of versions such as
    ``runs/digits``, each version that holds ``metrics.jsonl``."""
    path = Path(path)
    if path.is_dir() and not (path / "metrics.jsonl").exists():
        found = [version for version in run_versions(path) if (version / "metrics.jsonl").is_file()]
        if found:
            return found
    return [path]


def run_label(directory) -> str:
    """A run directory's name in legends and tabs: ``digits/version_1`` for a version, else its folder's name."""
    path = Path(directory).resolve()
    path = path.parent if path.is_file() else path
    return f"{path.parent.name}/{path.name}" if path in run_versions(path.parent) else path.name

"""Run directories: each run's own folder, ``runs/<name>/version_N``, laid out as Lightning does.

Running a run file again never appends to what the last run wrote: the first run named ``digits`` writes into
``runs/digits/version_0``, the next into ``version_1``. Hooks write there (metrics, tensorboard, plots; checkpoints
beyond the ``[checkpoint]`` section's), reading it as ``run.directory`` (:attr:`sigma_core.RunView.directory`).
A resumed run continues in the directory its checkpoint's metadata names.
"""

import contextlib
import re
from pathlib import Path

from sigma_core.atomic import check_writable

#: Where run directories go, under the current directory.
ROOT = Path("runs")
_VERSION = re.compile(r"version_(\d+)")


def new_version(name: str, root=ROOT) -> Path:
    """Make and return ``<root>/<name>/version_N``, N one above the highest there (0 for the first).

    Made with ``mkdir``, which fails when the folder exists: two runs starting at once get two versions.
    """
    parent = check_writable(Path(root) / name, folder=True, what="run directory")
    while True:
        taken = versions(parent)
        path = parent / f"version_{int(_VERSION.fullmatch(taken[-1].name)[1]) + 1 if taken else 0}"
        with contextlib.suppress(FileExistsError):  # another run took that number first: count again
            path.mkdir()
            return path


def versions(folder) -> list[Path]:
    """The ``version_N`` folders in ``folder``, in the order of N."""
    found = [path for path in Path(folder).glob("version_*") if _VERSION.fullmatch(path.name) and path.is_dir()]
    return sorted(found, key=lambda path: int(_VERSION.fullmatch(path.name)[1]))


def run_directories(path) -> list[Path]:
    """The runs ``path`` names for ``sigma plot`` and ``sigma dashboard``: the run directory (or metrics file)
    itself, or, for a folder of versions such as ``runs/digits``, each version that holds ``metrics.jsonl``."""
    path = Path(path)
    if path.is_dir() and not (path / "metrics.jsonl").exists():
        found = [version for version in versions(path) if (version / "metrics.jsonl").is_file()]
        if found:
            return found
    return [path]


def label(directory) -> str:
    """A run directory's name in legends and tabs: ``digits/version_1`` for a version, else its folder's name."""
    path = Path(directory).resolve()
    path = path.parent if path.is_file() else path
    return f"{path.parent.name}/{path.name}" if _VERSION.fullmatch(path.name) else path.name

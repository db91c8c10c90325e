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

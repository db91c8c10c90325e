"""Images a run publishes: any run value whose value is the path of a PNG file inside the run's folder.

A hook that draws something (the ``dream`` hook of sigmann-debug: what the network thinks each class looks like)
writes a PNG into the run's folder and publishes its path as a run value; the dashboard shows every such value
beside the drawing pad and serves it at ``GET /api/image``. It knows no such hook by name: the path is the seam.
Only files inside the run's folder (links resolved) are served, so a run value cannot make the dashboard read
any other file on the machine.
"""

from __future__ import annotations

from pathlib import Path


def published(values) -> dict[str, str]:
    """The run values that name a PNG file: name -> the path as published."""
    return {name: value for name, value in values.items() if isinstance(value, str) and value.lower().endswith(".png")}


def image_file(folder, value: str) -> Path:
    """The PNG ``value`` names, resolved: ValueError if it lies outside ``folder`` (or there is no folder),
    LookupError if it is not there (not yet, or gone)."""
    path = Path(value).resolve()  # relative to where the run runs, as the hook that published it meant it
    if folder is None or not path.is_relative_to(Path(folder).resolve()):
        raise ValueError(f"{value!r} is not inside the run's folder, so it is not served")
    if not path.is_file():
        raise LookupError(f"{value!r} does not exist")
    return path


def listing(values, folder) -> dict[str, dict]:
    """What the page shows: each published image inside ``folder`` that exists, with its modification time
    (ns), which changes when the image is rewritten and so tells the page to load it again."""
    shown = {}
    for name, value in published(values).items():
        try:
            shown[name] = {"path": value, "modified": image_file(folder, value).stat().st_mtime_ns}
        except (LookupError, ValueError, OSError):  # refused, or not (yet) there: not shown
            continue
    return shown

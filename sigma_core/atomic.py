"""Atomic file writes: a file appears complete under its final name, or not at all.

Results, checkpoints and cached data are written to a temporary file in the
same directory, flushed and fsynced, renamed over the final name (atomic on
one file system), and the directory is fsynced so the rename itself survives
a crash. A crash mid-write — even SIGKILL — leaves the previous file intact.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb"):
    """Yield an open temporary file; on success it replaces ``path`` durably."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The one check before reading a file a user hands us: it must be a regular file.

Opening a FIFO blocks until something writes to it and a device such as ``/dev/zero`` never ends, so a run file,
data file or checkpoint that is one of them would hang Sigma instead of failing. Every reader of a user's file
calls :func:`check_readable` first; a path that does not exist or cannot be read is left to the reader's message.
"""

import os
import stat
from pathlib import Path

from sigma_core.errors import SigmaError

_KINDS = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISCHR: "a character device",
          stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}


def check_readable(path, error: type[Exception] = SigmaError, what: str = "") -> Path:
    """``path``, unless it is not a regular file: then one ``error`` naming it (and ``what`` it is). Links are
    followed: a link to ``/dev/zero`` is refused like the device itself."""
    path = Path(path)
    if kind := special_kind(path):
        raise error(f"{what + ' ' if what else ''}{path}: cannot read it (it is {kind}, not a regular file)")
    return path


def special_kind(path) -> str | None:
    """What ``path`` is if it exists and is not a regular file (``"a FIFO (named pipe)"``), else None. Writers ask
    too (:mod:`sigma_core.atomic`): replacing ``/dev/null`` given as ``--out`` would put a file in its place."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, no permission, a NUL in the name: the caller says so in its words
        return None
    return next((kind for test, kind in _KINDS.items() if test(mode)), None)

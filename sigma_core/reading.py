"""The one check before reading a file a user hands us: it must be a regular file.

Opening a FIFO blocks until something writes to it, and a device such as
``/dev/zero`` never ends, so a run file, data file, checkpoint or metrics file
that is one of them would hang Sigma instead of failing. Every reader of a
user's file calls :func:`check_readable` first (the counterpart of
:func:`sigma_core.atomic.check_writable` for writers); a path that does not
exist or cannot be read is left to the reader's own message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import SigmaError

_KINDS = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISCHR: "a character device",
          stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}


def check_readable(path, error: type[Exception] = SigmaError, what: str = "") -> Path:
    """Refuse, with one ``error`` naming ``path`` (and ``what`` it is), a path that is not a regular file.

    Symbolic links are followed: a link to ``/dev/zero`` is refused like the device itself.
    """
    path = Path(path)
    kind = special_kind(path)
    if kind:
        raise error(f"{what + ' ' if what else ''}{path}: cannot read it (it is {kind}, not a regular file)")
    return path


def special_kind(path) -> str | None:
    """What ``path`` is if it exists and is not a regular file (``"a FIFO (named pipe)"``), else None.

    Writers ask too (:mod:`sigma_core.atomic`): they replace a file whole, which would put a regular file in
    the place of ``/dev/null`` given as ``--out``.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, no permission, a NUL in the name: the caller says so in its words
        return None
    return next((kind for test, kind in _KINDS.items() if test(mode)), None)

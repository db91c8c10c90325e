"""Atomic writes: a file or folder appears complete under its final name, or not at all.

Everything a later run trusts (checkpoints, results, downloads, caches) is
written under a hidden temporary name beside its final path
(``.<name>.partial-<pid>-<random>``), fsynced, renamed over it, and the
directory fsynced so the rename survives a crash. A crash, even SIGKILL,
leaves the previous file intact and at most a leftover, which
:func:`remove_stale` deletes once its process is gone. Files are created with
``open`` (0666 minus the umask), not ``tempfile.mkstemp`` (always 0600).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from pathlib import Path

PARTIAL = ".partial-"
_LEFTOVER = re.compile(rf"\..+{re.escape(PARTIAL)}(\d+)-\w+")


def partial_prefix(final: Path) -> str:
    """The start of a temporary name for ``final``: hidden, naming this process so others can tell it is live."""
    return f".{final.name}{PARTIAL}{os.getpid()}-"


@contextlib.contextmanager
def atomic_path(final, *, folder: bool = False):
    """Yield a temporary path beside ``final`` (an empty folder if ``folder``); on success it replaces ``final``."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(partial_prefix(final) + secrets.token_hex(4))
    if folder:
        partial.mkdir()
    try:
        yield partial
        _fsync(partial, tree=True)
        if folder and final.exists():  # a stale copy (a cache being rebuilt) gives way to the new one
            shutil.rmtree(final)
        os.replace(partial, final)
    except BaseException:
        _remove(partial)
        raise
    _fsync(final.parent)


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb"):
    """Yield an open file; on success it replaces ``path`` durably."""
    with atomic_path(path) as partial, open(partial, mode.replace("w", "x")) as stream:
        yield stream


def remove_stale(directory) -> list[Path]:
    """Delete leftovers of writes whose process has gone (killed mid-write); return them."""
    stale = [path for path in Path(directory).glob(f".*{PARTIAL}*")
             if (match := _LEFTOVER.fullmatch(path.name)) and not _alive(int(match[1]))]
    for path in stale:
        _remove(path)
    return stale


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # someone else's process
        pass
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync(path: Path, tree: bool = False) -> None:
    """Flush ``path`` (and, with ``tree``, everything in a folder) to disk; skipped where it cannot be opened."""
    if tree and path.is_dir():
        for child in path.iterdir():
            _fsync(child, tree=True)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Atomic writes: a file or folder appears complete under its final name, or not at all.

Everything a later run trusts (checkpoints, results, downloads, caches) is
written under a hidden temporary name beside its final path
(``.<name>.partial-<pid>-<random>``), fsynced, renamed over it, and the
directory fsynced so the rename survives a crash. A crash, even SIGKILL,
leaves the previous file intact and at most a leftover, which
:func:`remove_stale` deletes once its process is gone. Files are created with
``open`` (0666 minus the umask), not ``tempfile.mkstemp`` (always 0600).

Every writer goes through here, so a location that cannot be written is one
:class:`WriteError` naming the path and why, whoever writes: an existing
directory where a file goes, a device or FIFO (``--out /dev/null``: replacing it
would put a file in its place), a file where a folder must be, no permission, a
read-only or full disk, a name too long. :func:`check_writable` refuses such a
path before costly work (a command's ``--out`` before it computes anything);
:func:`atomic_path` and :func:`atomic_write` report the same way as they write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from .errors import SigmaError
from .reading import special_kind

PARTIAL = ".partial-"
_LEFTOVER = re.compile(rf"\..+{re.escape(PARTIAL)}(\d+)-\w+")
_RANDOM = 4  # random bytes in a temporary name (twice as many hex digits)


class WriteError(SigmaError):
    """A file or folder cannot be written where asked; the message names the path and says why."""


def write_error(path, error: OSError, *, folder: bool = False, what: str = "") -> WriteError:
    """The one line for ``error``, raised writing ``path`` (a file, or a folder to write in if ``folder``).

    ``what`` names where the path came from (``"--out"``). The reason is read
    from the file system where errno alone is vague: which ancestor is a file,
    whether the path itself is a directory.
    """
    path = Path(path)
    blocker = next((p for p in reversed(path.parents) if _kind(p) == "file"), None)
    if blocker is not None:
        reason = f"{blocker} is a file, not a folder"
    elif folder and _kind(path) == "file":
        reason = "it is a file, not a folder"
    elif not folder and _kind(path) == "folder":
        reason = "it is a directory: name a file"
    elif not folder and special_kind(path):  # a device or FIFO: replaced whole, /dev/null would become a file
        reason = f"it is {special_kind(path)}, not a regular file, and writing replaces it"
    elif error.errno == errno.ENAMETOOLONG:
        reason = "its name is too long for the file system"
    else:
        reason = error.strerror or str(error)
    return WriteError(f"{what + ' ' if what else ''}{path}: cannot write {'there' if folder else 'it'} ({reason})")


def check_writable(path, *, folder: bool = False, what: str = "") -> Path:
    """Refuse now, with a :class:`WriteError`, a ``path`` that cannot be written: as a file, or with ``folder`` as a
    folder to write files in. Missing folders are made, as writing would make them. Returns ``path`` as a Path."""
    path = Path(path)
    directory = path if folder else path.parent
    try:
        if not folder and _kind(path) == "folder":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not folder and special_kind(path):
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))  # reworded by write_error
        directory.mkdir(parents=True, exist_ok=True)
        if not folder:
            _check_name(path)
        tempfile.TemporaryFile(dir=directory).close()  # permission, a read-only disk
    except OSError as error:
        raise write_error(path, error, folder=folder, what=what) from None
    return path


def partial_prefix(final: Path) -> str:
    """The start of a temporary name for ``final``: hidden, naming this process so others can tell it is live.

    A long final name is shortened in it, so that the temporary name fits wherever the final one does.
    """
    tail = f"{PARTIAL}{os.getpid()}-"
    name, room = final.name, _name_max(final.parent) - len(f".{tail}") - 2 * _RANDOM
    while len(os.fsencode(name)) > room:
        name = name[:-1]
    return f".{name}{tail}"


@contextlib.contextmanager
def atomic_path(final, *, folder: bool = False, what: str = ""):
    """Yield a temporary path beside ``final`` (an empty folder if ``folder``); on success it replaces ``final``.

    A failure to make, move or flush it, or an ``OSError`` inside that names the
    temporary path (or a path in it), is a :class:`WriteError` naming ``final``
    (and ``what``); anything else raised inside passes through. Either way the
    temporary path is removed and ``final`` stays as it was.
    """
    final = Path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        _check_name(final)
        if not folder and special_kind(final):
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), str(final))  # reworded by write_error
        partial = final.with_name(partial_prefix(final) + secrets.token_hex(_RANDOM))
        if folder:
            partial.mkdir()
    except OSError as error:
        raise write_error(final, error, folder=folder, what=what) from None
    try:
        try:
            yield partial
        except OSError as error:
            if not _names(error, partial):
                raise
            raise write_error(final, error, folder=folder, what=what) from None
        try:
            _fsync(partial, tree=True)
            if folder and final.is_dir() and not final.is_symlink():  # a stale copy (a cache rebuilt) gives way
                shutil.rmtree(final)
            os.replace(partial, final)
        except OSError as error:
            raise write_error(final, error, folder=folder, what=what) from None
    except BaseException:
        _remove(partial)
        raise
    _fsync(final.parent)


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", *, what: str = ""):
    """Yield an open file; on success it replaces ``path`` durably.

    Failing to write the stream (a full disk) is a :class:`WriteError` naming
    ``path``, as in :func:`atomic_path`; an ``OSError`` naming another file
    (read while writing this one) passes through.
    """
    with atomic_path(path, what=what) as partial:
        try:
            with open(partial, mode.replace("w", "x")) as stream:
                yield stream
        except OSError as error:
            if error.filename is not None and not _names(error, partial):
                raise
            raise write_error(path, error, what=what) from None


def remove_stale(directory) -> list[Path]:
    """Delete leftovers of writes whose process has gone (killed mid-write); return them."""
    stale = [path for path in Path(directory).glob(f".*{PARTIAL}*")
             if (match := _LEFTOVER.fullmatch(path.name)) and not _alive(int(match[1]))]
    for path in stale:
        _remove(path)
    return stale


def _kind(path: Path) -> str | None:
    """``"folder"``, ``"file"`` (anything else that exists) or None (nothing there, or no way to tell)."""
    try:
        return "folder" if path.is_dir() else "file" if path.exists() else None
    except OSError:  # a name too long, no permission to look
        return None


def _names(error: OSError, partial: Path) -> bool:
    """Whether ``error`` is about ``partial`` or a path inside it."""
    return any(name is not None and (Path(os.fsdecode(name)) == partial or partial in Path(os.fsdecode(name)).parents)
               for name in (error.filename, error.filename2))


def _name_max(directory: Path) -> int:
    """The longest file name, in bytes, that ``directory``'s file system takes (255 where it cannot say)."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _check_name(path: Path) -> None:
    """Raise the file system's ``ENAMETOOLONG`` before writing, not after, for a name longer than it takes."""
    if len(os.fsencode(path.name)) > _name_max(path.parent):
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(path))


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

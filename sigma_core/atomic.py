"""Atomic writes: a file or folder appears complete under its final name, or not at all.

Everything a later run trusts (checkpoints, results, downloads, caches) is written under a hidden name beside
its final path (``.<name>.partial-<pid>-<random>``), fsynced, renamed over it, and the directory fsynced. A
crash, even SIGKILL, leaves the previous file intact and at most a leftover, which :func:`remove_stale`
deletes once its process is gone. Files are made with ``open`` (0666 minus the umask), not ``mkstemp`` (0600).

Every writer goes through here, so a path that cannot be written is one :class:`WriteError` naming it and
why, whoever writes: :func:`check_writable` refuses it before costly work, :func:`atomic_path` and
:func:`atomic_write` as they write.
"""

import contextlib
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from sigma_core.errors import SigmaError
from sigma_core.reading import special_kind

PARTIAL = ".partial-"
_LEFTOVER = re.compile(rf"\..+{re.escape(PARTIAL)}(\d+)-\w+")
_RANDOM = 4  # random bytes in a temporary name (twice as many hex digits)


class WriteError(SigmaError):
    """A file or folder cannot be written where asked; the message names the path and says why."""


def write_error(path, error: OSError | None = None, *, folder: bool = False, what: str = "") -> WriteError:
    """The one line for failing to write ``path`` (a file, or with ``folder`` a folder to write in).

    ``what`` names where the path came from (``"--out"``). The reason is read from the file system where
    ``error`` alone is vague (which ancestor is a file, whether the path is a directory).
    """
    path = Path(path)
    blocker = next((p for p in reversed(path.parents) if _is_file(p)), None)
    reason = f"{blocker} is a file, not a folder" if blocker else _obstacle(path, folder)
    reason = reason or getattr(error, "strerror", None) or str(error)
    return WriteError(f"{what + ' ' if what else ''}{path}: cannot write {'there' if folder else 'it'} ({reason})")


def check_writable(path, *, folder: bool = False, what: str = "") -> Path:
    """Refuse now, with a :class:`WriteError`, a ``path`` that cannot be written: as a file, or with ``folder`` as a
    folder to write files in. Missing folders are made, as writing would make them. Returns ``path`` as a Path."""
    path = Path(path)
    directory = path if folder else path.parent
    if _obstacle(path, folder):
        raise write_error(path, folder=folder, what=what)
    try:
        directory.mkdir(parents=True, exist_ok=True)
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

    Failing to make, move or flush it, or an ``OSError`` inside that names the temporary path (or a path in
    it), is a :class:`WriteError` naming ``final`` (and ``what``); anything else raised inside passes through.
    Either way the temporary path is removed and ``final`` stays as it was.
    """
    final = Path(final)
    if _obstacle(final, folder):
        raise write_error(final, folder=folder, what=what)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
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

    Failing to write the stream (a full disk) is a :class:`WriteError` naming ``path``, as in
    :func:`atomic_path`; an ``OSError`` naming another file (read while writing this one) passes through.
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


def _obstacle(path: Path, folder: bool) -> str | None:
    """Why the file system, as it is, would refuse writing ``path`` whole (None if nothing shows it)."""
    if folder and _is_file(path):
        return "it is a file, not a folder"
    if not folder and os.path.isdir(path):
        return "it is a directory: name a file"
    if not folder and (kind := special_kind(path)):  # replaced whole, --out /dev/null would become a file
        return f"it is {kind}, not a regular file, and writing replaces it"
    if len(os.fsencode(path.name)) > _name_max(path.parent):  # the temporary name is shortened: say so before
        return "its name is too long for the file system"
    return None


def _is_file(path) -> bool:
    """Whether something that is not a folder is at ``path`` (False where the file system cannot say)."""
    return os.path.exists(path) and not os.path.isdir(path)


def _names(error: OSError, partial: Path) -> bool:
    """Whether ``error`` is about ``partial`` or a path inside it."""
    return any(name is not None and Path(os.fsdecode(name)).is_relative_to(partial)
               for name in (error.filename, error.filename2))


def _name_max(directory: Path) -> int:
    """The longest file name, in bytes, that ``directory``'s file system takes (255 where it cannot say)."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


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

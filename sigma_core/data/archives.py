"""Unpack compressed sources (gz, bz2, zip, tar and its compressed forms) once.

A single compressed file (``x.csv.gz``) becomes a file (``x.csv``); an archive
(``x.zip``, ``x.tar.gz``) becomes a folder. The result goes next to a cached
download or under the data directory for a local file, is written atomically,
and is reused by later runs while the source holds the same content (see
:mod:`sigma_core.data.cache`), so unpacking happens once per source content.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import shutil
import tarfile
import zipfile
import zlib
from pathlib import Path

from sigma_core.atomic import atomic_path, remove_stale
from sigma_core.data.cache import data_dir, forget, matches, record
from sigma_core.data.errors import DataError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar", ".zip")
STREAM_OPENERS = {".gz": gzip.open, ".bz2": bz2.open}


def is_compressed(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(ARCHIVE_SUFFIXES) or path.suffix.lower() in STREAM_OPENERS


def _strip_suffix(name: str) -> str:
    lower = name.lower()
    for suffix in (*ARCHIVE_SUFFIXES, *STREAM_OPENERS):
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _unpacked_path(path: Path, root: Path | None) -> Path:
    """Where ``path`` unpacks to: beside it under ``root``, or a per-path folder in the data directory."""
    if root is None:
        key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        root = data_dir() / "unpacked" / key
    return root / _strip_suffix(path.name)


def unpack(path: Path, root: Path | None = None) -> Path:
    """The unpacked form of ``path`` (a file or a folder), unpacked again whenever its content changed."""
    path = Path(path)
    target = _unpacked_path(path, root)
    if matches(path, target):
        return target
    forget(target)
    remove_stale(target.parent)
    name = path.name.lower()
    try:
        if name.endswith(".zip"):
            with atomic_path(target, folder=True) as partial, zipfile.ZipFile(path) as archive:
                archive.extractall(partial)
        elif name.endswith(ARCHIVE_SUFFIXES):
            with atomic_path(target, folder=True) as partial, tarfile.open(path) as archive:
                archive.extractall(partial, filter="data")  # refuses absolute paths and ``..``
        else:
            with atomic_path(target) as partial, STREAM_OPENERS[path.suffix.lower()](path, "rb") as source, \
                    open(partial, "xb") as out:
                shutil.copyfileobj(source, out)
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError, RuntimeError, NotImplementedError) \
            as error:  # RuntimeError, NotImplementedError: an encrypted or oddly compressed zip member
        raise DataError(f"cannot unpack {path}: {error}") from None
    record(path, target)
    return target

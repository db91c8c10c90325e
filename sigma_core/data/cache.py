"""Where downloaded, unpacked and block-cached data lives, and when a cached file may be trusted.

Everything the data path stores goes under :func:`data_dir`: ``SIGMA_DATA_DIR``
when set, else the user cache directory (``platformdirs``), so runs share
downloads without writing into the working directory. Files are written with
:mod:`sigma_core.atomic`, so a final path is always complete.

A cache entry is keyed on content, not on modification times (``cp -p``,
``rsync -t`` and untar set old ones): a hidden *stamp* beside it records the
size and SHA-256 of the file it was made from (:func:`record`), and the entry
is reused only while that file still matches (:func:`matches`). The file is
hashed again only when its size, mtime, ctime, inode or device changed; no
write leaves all of those as they were.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import platformdirs

from sigma_core.atomic import atomic_write

CHUNK = 1 << 16


def data_dir() -> Path:
    """The root folder for Sigma's data files (created on first use)."""
    root = os.environ.get("SIGMA_DATA_DIR") or platformdirs.user_cache_dir("sigmann")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``"md5"`` or ``"sha256"``), read in chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def stamp_path(entry: Path) -> Path:
    """Where the stamp of the cache entry ``entry`` lives: a hidden file beside it."""
    return entry.with_name(f".{entry.name}.source.json")


def record(source: Path, entry: Path, sha256: str | None = None) -> None:
    """Stamp ``entry`` as made from ``source``'s current content."""
    stamp = {"size": source.stat().st_size, "sha256": sha256 or file_digest(source), "stat": _stat(source)}
    with atomic_write(stamp_path(entry), "w") as stream:
        json.dump(stamp, stream)


def matches(source: Path, entry: Path) -> bool:
    """True if ``entry`` exists and its stamp says it was made from the content ``source`` holds now."""
    try:
        stamp = json.loads(stamp_path(entry).read_text())
        if not entry.exists():
            return False
        if stamp["stat"] == _stat(source):
            return True
        if stamp["size"] != source.stat().st_size or stamp["sha256"] != file_digest(source):
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    record(source, entry, stamp["sha256"])  # same content, new stat: skip the hash next time
    return True


def forget(entry: Path) -> None:
    """Drop ``entry``'s stamp, so nothing trusts ``entry`` until it is made and recorded again."""
    stamp_path(entry).unlink(missing_ok=True)


def _stat(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]

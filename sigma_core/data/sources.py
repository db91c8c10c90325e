"""Sources: a local path, URL or fallback list of them, resolved to a local file before extraction.

URLs (``http``, ``https``, ``file``) are downloaded with retries and checksums,
and compressed files (gz, bz2, zip, tar and its compressed forms) unpacked,
atomically, under :func:`data_dir`. A cached file is keyed on content, not
modification times (``cp -p``, ``rsync -t`` and untar set old ones): a hidden
stamp beside it records the size and SHA-256 of what it was made from, hashed
again only when the source's size, mtime, ctime, inode or device changed.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import logging
import os
import shutil
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import platformdirs

from sigma_core.atomic import atomic_path, atomic_write, remove_stale
from sigma_core.data.errors import DataError

log = logging.getLogger("sigma")
CHUNK = 1 << 16
URL_SCHEMES = ("http", "https", "file")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar", ".zip")
STREAM_OPENERS = {".gz": gzip.open, ".bz2": bz2.open}


def data_dir() -> Path:
    """The root folder for Sigma's data files (created on first use)."""
    path = Path(os.environ.get("SIGMA_DATA_DIR") or platformdirs.user_cache_dir("sigmann")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, algorithm).hexdigest()


def verify(what, checksums: dict[str, str], digests: dict | None = None) -> None:
    """Raise :class:`DataError` unless each ``{algorithm: hex}`` checksum matches the file (or ``digests``)."""
    for algorithm, expected in checksums.items():
        actual = digests[algorithm].hexdigest() if digests else file_digest(what, algorithm)
        if actual != expected.lower():
            raise DataError(f"{what}: {algorithm} checksum mismatch, expected {expected}, got {actual}")


def _stamp(entry: Path) -> Path:
    """Which content the cache entry ``entry`` was made from."""
    return entry.with_name(f".{entry.name}.source.json")


def _stat(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


def record(source: Path, entry: Path, sha256: str | None = None) -> None:
    """Stamp ``entry`` as made from ``source``'s current content."""
    with atomic_write(_stamp(entry), "w") as stream:
        json.dump({"size": source.stat().st_size, "sha256": sha256 or file_digest(source), "stat": _stat(source)},
                  stream)


def matches(source: Path, entry: Path) -> bool:
    """True if ``entry`` exists and its stamp says it was made from the content ``source`` holds now."""
    try:
        stamp = json.loads(_stamp(entry).read_text())
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
    _stamp(entry).unlink(missing_ok=True)


def is_compressed(path: Path) -> bool:
    return path.name.lower().endswith((*ARCHIVE_SUFFIXES, *STREAM_OPENERS))


def unpack(path: Path, root: Path | None = None) -> Path:
    """``path`` unpacked (an archive to a folder, ``x.csv.gz`` to ``x.csv``) beside it under ``root``, or under
    the data directory; unpacked again whenever its content changed."""
    path = Path(path)
    name = path.name.lower()
    if root is None:
        root = data_dir() / "unpacked" / hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    suffix = next(s for s in (*ARCHIVE_SUFFIXES, *STREAM_OPENERS) if name.endswith(s))
    target = root / path.name[:-len(suffix)]
    if matches(path, target):
        return target
    forget(target)
    remove_stale(target.parent)
    try:
        if suffix == ".zip":
            with atomic_path(target, folder=True) as partial, zipfile.ZipFile(path) as archive:
                archive.extractall(partial)
        elif suffix in ARCHIVE_SUFFIXES:
            with atomic_path(target, folder=True) as partial, tarfile.open(path) as archive:
                archive.extractall(partial, filter="data")  # refuses absolute paths and ``..``
        else:
            with atomic_path(target) as partial, STREAM_OPENERS[suffix](path, "rb") as source, \
                    open(partial, "xb") as out:
                shutil.copyfileobj(source, out)
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError, RuntimeError, NotImplementedError) \
            as error:  # RuntimeError, NotImplementedError: an encrypted or oddly compressed zip member
        raise DataError(f"cannot unpack {path}: {error}") from None
    record(path, target)
    return target


def _fetch_once(url: str, partial: Path, checksums: dict[str, str], progress: bool, timeout: float) -> str:
    """Stream ``url`` into ``partial``, check its length and checksums; return its SHA-256."""
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    digests = {algorithm: hashlib.new(algorithm) for algorithm in {*checksums, "sha256"}}
    with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "xb") as out:
        total = response.headers.get("Content-Length")
        total = int(total) if total else None
        received = 0
        with Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn(),
                      disable=not progress, transient=True) as bar:
            task = bar.add_task(f"downloading {url.rsplit('/', 1)[-1]}", total=total)
            while chunk := response.read(CHUNK):
                out.write(chunk)
                received += len(chunk)
                for digest in digests.values():
                    digest.update(chunk)
                bar.update(task, advance=len(chunk))
    if total is not None and received != total:
        raise DataError(f"{url}: download ended after {received} of {total} bytes")
    verify(url, checksums, digests)
    return digests["sha256"].hexdigest()


def _permanent(error: Exception) -> bool:
    """Failures that a retry cannot fix: the server or file system says the file is not there."""
    if isinstance(error, urllib.error.HTTPError):
        return 400 <= error.code < 500
    return isinstance(error, urllib.error.URLError) and isinstance(error.reason, FileNotFoundError)


def download(url: str, destination: Path, *, checksums: dict[str, str] | None = None, retries: int = 2,
             progress: bool = True, timeout: float = 60.0, backoff: float = 1.0) -> Path:
    """Download ``url`` to ``destination`` (tried up to ``1 + retries`` times); return ``destination``.

    An existing ``destination`` is reused when it matches ``checksums`` (``{"md5"|"sha256": hex}``)
    or, without them, still holds what was downloaded.
    """
    checksums, destination = dict(checksums or {}), Path(destination)
    if destination.is_file():
        try:
            if not (checksums or matches(destination, destination)):
                raise DataError(f"{destination} is not the file downloaded before (truncated or changed)")
            verify(destination, checksums)
            return destination
        except DataError as error:
            log.warning("%s; downloading it again", error)
    forget(destination)
    remove_stale(destination.parent)
    log.info("downloading %s to %s", url, destination)
    errors = []
    for attempt in range(1 + retries):
        try:
            with atomic_path(destination) as partial:
                sha256 = _fetch_once(url, partial, checksums, progress, timeout)
            record(destination, destination, sha256)
            return destination
        except (OSError, urllib.error.URLError, DataError) as error:
            errors.append(f"attempt {attempt + 1}: {error}")
            if _permanent(error):
                break
            if attempt < retries:
                time.sleep(backoff * 2**attempt)
    raise DataError(f"cannot download {url} to {destination}: {'; '.join(errors)}")


def _is_url(source) -> bool:
    return urllib.parse.urlparse(str(source)).scheme in URL_SCHEMES


def _fetch(source: str | Path, checksums: dict[str, str], progress: bool) -> Path:
    if _is_url(source):
        url = str(source)
        name = Path(urllib.parse.urlparse(url).path).name or "download"
        cached = data_dir() / "downloads" / hashlib.sha256(url.encode()).hexdigest()[:12] / name
        return download(url, cached, checksums=checksums, progress=progress)
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"file not found: {path}")
    if path.is_file():
        verify(path, checksums)
    return path


def resolve(sources: str | Path | Sequence[str | Path], *, md5: str | None = None, sha256: str | None = None,
            unpack_archives: bool = True, progress: bool = True) -> Path:
    """A local path for the first usable source of ``sources`` (unpacked if compressed).

    ``md5``/``sha256`` are checked against whichever source is used, so every
    fallback must hold the same bytes; if none can be used the error says why each failed.
    """
    candidates = [sources] if isinstance(sources, (str, Path)) else list(sources)
    if not candidates:
        raise DataError("no data source given")
    checksums = {name: value for name, value in (("md5", md5), ("sha256", sha256)) if value}
    errors = []
    for source in candidates:
        try:
            path = _fetch(source, checksums, progress)
        except DataError as error:
            errors.append(str(error))
            continue
        if not (unpack_archives and path.is_file() and is_compressed(path)):
            return path
        if not _is_url(source):
            return unpack(path)
        try:
            return unpack(path, path.parent)
        except DataError:  # a download that does not unpack is no use to a later run either
            forget(path)
            path.unlink(missing_ok=True)
            raise
    if len(errors) == 1:
        raise DataError(errors[0])
    raise DataError("no source could be used: " + "; ".join(f"[{i + 1}] {e}" for i, e in enumerate(errors)))

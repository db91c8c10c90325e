"""Sources: URLs, fallback lists, archives and checksums, resolved to a local path before extraction.

The core reads a plain local path itself and hands everything else to the
source of its URL scheme: :func:`resolve`, registered as ``http``, ``https``
and ``file``. Pooch does the downloading (streamed to a temporary file,
checked against an ``md5`` or ``sha256`` before it is moved into place,
retried) and unzips and decompresses (``.gz``, ``.bz2``, ``.xz``); two small
pieces stand in where it does not fit: :func:`_copy`, a downloader for
``file://`` URLs, which pooch does not fetch, and :func:`_untar`, because
pooch's ``Untar`` applies tarfile's ``data`` filter (no absolute paths, no
``..``) only from Python 3.12.

What pooch does not do is kept: caches keyed on content, not modification
times (``cp -p``, ``rsync -t`` and untar set old ones). A hidden stamp beside
a download or an unpacked entry records the size and SHA-256 of what it was
made from, hashed again only when the source's size, mtime, ctime, inode or
device changed. A download is reused only while it is intact (with a checksum
or without one), an archive unpacked again only when its content changed, and
unpacking is atomic (:func:`sigma_core.atomic_path`), so a killed run leaves
nothing a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
import os
import shutil
import tarfile
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import platformdirs
import pooch
import requests

from sigma_core import COMPRESSED_SUFFIXES, DataError, atomic_path, atomic_write, one_line, remove_stale

log = logging.getLogger("sigma")
pooch.get_logger().setLevel(logging.WARNING)  # its "Downloading ..." lines: Sigma logs its own, at its own level
CHUNK = 1 << 16
URL_SCHEMES = ("http", "https", "file")
TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar")
STREAM_METHODS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "lzma"}  # pooch.Decompress's names


def data_dir() -> Path:
    """The root folder for Sigma's data files (created on first use): ``SIGMA_DATA_DIR`` or the user cache."""
    path = Path(os.environ.get("SIGMA_DATA_DIR") or platformdirs.user_cache_dir("sigmann")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, algorithm).hexdigest()


def verify(path: Path, checksums: dict[str, str]) -> None:
    """Raise :class:`DataError` unless each ``{algorithm: hex}`` checksum matches the file."""
    for algorithm, expected in checksums.items():
        actual = file_digest(path, algorithm)
        if actual != expected.lower():
            raise DataError(f"{path}: {algorithm} checksum mismatch, expected {expected}, got {actual}")


# -- content stamps ------------------------------------------------------------------------------------------------


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


# -- unpacking -----------------------------------------------------------------------------------------------------


def is_compressed(path: Path) -> bool:
    return path.name.lower().endswith(COMPRESSED_SUFFIXES)


def _untar(path: Path, folder: Path) -> None:
    with tarfile.open(path) as archive:
        archive.extractall(folder, filter="data")  # refuses absolute paths and ``..``


def unpack(path: Path, root: Path | None = None) -> Path:
    """``path`` unpacked (an archive to a folder, ``x.csv.gz`` to ``x.csv``) under ``root``, or under the data
    directory; unpacked again whenever its content changed."""
    path = Path(path)
    if root is None:
        root = data_dir() / "unpacked" / hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    suffix = next(s for s in COMPRESSED_SUFFIXES if path.name.lower().endswith(s))
    target = root / path.name[:-len(suffix)]
    if matches(path, target):
        return target
    forget(target)
    remove_stale(target.parent)
    try:
        with atomic_path(target, folder=suffix not in STREAM_METHODS) as partial:
            if suffix == ".zip":
                pooch.Unzip(extract_dir=str(partial))(str(path), "download", None)
            elif suffix in TAR_SUFFIXES:
                _untar(path, partial)
            else:
                pooch.Decompress(method=STREAM_METHODS[suffix], name=str(partial))(str(path), "download", None)
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, tarfile.TarError, RuntimeError,
            NotImplementedError) as error:  # RuntimeError, NotImplementedError: an encrypted or oddly compressed zip
        raise DataError(f"cannot unpack {path}: {one_line(error)}") from None
    record(path, target)
    return target


# -- downloading ---------------------------------------------------------------------------------------------------


class _ProgressBar:
    """Pooch's progress-bar protocol (``total``, ``update``, ``reset``, ``close``) on a rich progress bar."""

    def __init__(self, label: str):
        from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

        self._bar = Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn(), transient=True)
        self._task = self._bar.add_task(label, total=None)

    @property
    def total(self) -> float | None:
        return self._bar.tasks[0].total

    @total.setter
    def total(self, total: int) -> None:  # set as a download starts: 0 when the server sends no length
        self._bar.update(self._task, total=total or None, completed=0)
        self._bar.start()

    def update(self, advance: int) -> None:
        self._bar.update(self._task, advance=advance)

    def reset(self) -> None:
        self._bar.reset(self._task)

    def close(self) -> None:
        self._bar.stop()


def _copy(url: str, output_file: str, fetcher) -> None:
    """Pooch's downloader protocol for a ``file://`` URL: a copy of the file (a missing one is not retried)."""
    shutil.copyfile(urllib.request.url2pathname(urllib.parse.urlparse(url).path), output_file)


def download(url: str, destination, *, checksums: dict[str, str] | None = None, retries: int = 2,
             progress: bool = True, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``destination`` with pooch (tried up to ``1 + retries`` times); return ``destination``.

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
    destination.unlink(missing_ok=True)  # else pooch would keep it when no checksum is given
    log.info("downloading %s to %s", url, destination)
    known = next((f"{algorithm}:{checksums[algorithm]}" for algorithm in ("sha256", "md5") if algorithm in checksums),
                 None)
    fetcher = pooch.create(path=destination.parent, base_url="", registry={destination.name: known},
                           urls={destination.name: url}, retry_if_failed=retries)
    if urllib.parse.urlparse(url).scheme == "file":
        downloader = _copy
    else:
        bar = _ProgressBar(f"downloading {destination.name}") if progress else False
        downloader = pooch.HTTPDownloader(progressbar=bar, timeout=timeout, chunk_size=CHUNK)
    try:
        fetcher.fetch(destination.name, downloader=downloader)
        verify(destination, checksums)  # the other one, when both are given
    except (OSError, ValueError, requests.RequestException, DataError) as error:
        destination.unlink(missing_ok=True)
        if isinstance(error, requests.ConnectionError):  # offline, no DNS: urllib3's 400 characters say no more
            raise DataError(f"cannot download {url}: cannot connect to {urllib.parse.urlparse(url).netloc}") from None
        raise DataError(f"cannot download {url} to {destination}: {one_line(error)}") from None
    record(destination, destination)
    return destination


# -- the source ----------------------------------------------------------------------------------------------------


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

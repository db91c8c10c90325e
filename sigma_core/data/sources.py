"""Sources: where a data file comes from, resolved to a local path before extraction.

A source is a local path, or a ``http://``, ``https://`` or ``file://`` URL
downloaded into ``<data dir>/downloads`` (see :mod:`sigma_core.data.download`).
A list of sources is a fallback chain: the first that yields a file wins, and
if none does the error lists why each failed. A compressed result is unpacked
once per content (see :mod:`sigma_core.data.archives`); a downloaded file that
fails to unpack is dropped from the cache, so the next run downloads it again.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from sigma_core.data.archives import is_compressed, unpack
from sigma_core.data.cache import data_dir, forget
from sigma_core.data.download import download, verify
from sigma_core.data.errors import DataError

URL_SCHEMES = ("http", "https", "file")


def is_url(source: str) -> bool:
    return urllib.parse.urlparse(str(source)).scheme in URL_SCHEMES


def download_path(url: str) -> Path:
    """The cache file for ``url``: its file name under a folder keyed by the whole URL."""
    key = hashlib.sha256(url.encode()).hexdigest()[:12]
    name = Path(urllib.parse.urlparse(url).path).name or "download"
    return data_dir() / "downloads" / key / name


def _fetch(source: str | Path, checksums: dict[str, str], progress: bool) -> Path:
    if is_url(str(source)):
        return download(str(source), download_path(str(source)), checksums=checksums, progress=progress)
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
    fallback must hold the same bytes.
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
        if not is_url(str(source)):
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

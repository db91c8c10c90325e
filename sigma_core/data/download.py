"""Download one URL to a local file: progress bar, retries, checksum, atomic write.

The file is streamed to a temporary name while its digests are computed and
is renamed into place only when the whole body arrived and the digests match,
so an interrupted or corrupt download never leaves a file that a later run
would take as good. A stamp records the size and SHA-256 it arrived with
(see :mod:`sigma_core.data.cache`); a cached file that no longer matches it
(or the given checksums) is downloaded again. ``file://`` URLs go through the
same path (tests use them).
"""

from __future__ import annotations

import hashlib
import logging
import time
import urllib.error
import urllib.request
from pathlib import Path

from sigma_core.atomic import atomic_path, remove_stale
from sigma_core.data.cache import CHUNK, file_digest, forget, matches, record
from sigma_core.data.errors import DataError

log = logging.getLogger("sigma")


def verify(path: Path, checksums: dict[str, str]) -> None:
    """Raise :class:`DataError` naming the file if any ``{algorithm: hex}`` checksum differs."""
    for algorithm, expected in checksums.items():
        actual = file_digest(path, algorithm)
        if actual != expected.lower():
            raise DataError(f"{path}: {algorithm} checksum mismatch, expected {expected}, got {actual}")


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
            for chunk in iter(lambda: response.read(CHUNK), b""):
                out.write(chunk)
                received += len(chunk)
                for digest in digests.values():
                    digest.update(chunk)
                bar.update(task, advance=len(chunk))
    if total is not None and received != total:
        raise DataError(f"{url}: download ended after {received} of {total} bytes")
    for algorithm, expected in checksums.items():
        if digests[algorithm].hexdigest() != expected.lower():
            raise DataError(f"{url}: {algorithm} checksum mismatch, expected {expected}, "
                            f"got {digests[algorithm].hexdigest()}")
    return digests["sha256"].hexdigest()


def _permanent(error: Exception) -> bool:
    """Failures that a retry cannot fix: the server or file system says the file is not there."""
    if isinstance(error, urllib.error.HTTPError):
        return 400 <= error.code < 500
    return isinstance(error, urllib.error.URLError) and isinstance(error.reason, FileNotFoundError)


def download(url: str, destination: Path, *, checksums: dict[str, str] | None = None, retries: int = 2,
             progress: bool = True, timeout: float = 60.0, backoff: float = 1.0) -> Path:
    """Download ``url`` to ``destination`` (tried up to ``1 + retries`` times); return ``destination``.

    ``checksums`` maps ``"md5"``/``"sha256"`` to the expected hex digest. An
    existing ``destination`` is reused when it matches them or, without
    checksums, when it still holds what was downloaded; else it is downloaded again.
    """
    checksums = dict(checksums or {})
    destination = Path(destination)
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

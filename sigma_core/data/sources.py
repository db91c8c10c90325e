"""A run file's data path, resolved to a local file or folder before extraction.

The core reads a plain local path itself. Anything else goes to the *source*
registered for its URL scheme (:func:`sigma_core.hookspecs.register_sources`):
a URL, a list of fallbacks (by the scheme of its first entry), a compressed
file, or a path given with an ``md5`` or ``sha256`` to check (scheme ``file``).
``sigmann-data`` registers ``http``, ``https`` and ``file`` (downloads,
unpacking and checksums); without it, such a value is one line saying so.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from sigma_core import plugins
from sigma_core.data.errors import DataError
from sigma_core.errors import UnknownComponentError

#: What the ``file`` source unpacks; tar forms come before the plain streams they end with.
COMPRESSED_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar", ".zip", ".gz", ".bz2", ".xz")
#: The schemes of ``sigmann-data``, so that a value it would resolve names it.
DATA_SCHEMES = ("http", "https", "file")
#: Why a value needs a source, and what the source does with it.
_NEEDS = {"a URL": "download it", "a list of fallbacks": "try them", "compressed": "unpack it",
          "given with a checksum": "check it"}


def _scheme(value) -> str:
    """The URL scheme of ``value``, or ``""`` for a local path (a one-letter scheme is a Windows drive)."""
    scheme = urllib.parse.urlparse(str(value)).scheme if isinstance(value, str) else ""
    return scheme.lower() if len(scheme) > 1 else ""


def resolve_path(value: str | os.PathLike | Sequence[str | os.PathLike], *, md5: str | None = None,
                 sha256: str | None = None, key: str = "path") -> Path:
    """A local path for ``value``, the run file's ``key`` (see the module docstring)."""
    fallbacks = isinstance(value, (list, tuple))
    first = (value[0] if value else None) if fallbacks else value
    if not isinstance(first, (str, os.PathLike)):
        raise DataError(f"{key} must be a path, a URL or a list of them, got {value!r}")
    scheme = _scheme(first)
    needs = ("a list of fallbacks" if fallbacks else "a URL" if scheme
             else "compressed" if str(first).lower().endswith(COMPRESSED_SUFFIXES)
             else "given with a checksum" if md5 or sha256 else None)
    if needs is None:
        path = Path(value).expanduser()
        if not path.exists():
            raise DataError(f"file not found: {path}")
        return path
    scheme = scheme or "file"
    try:
        source = plugins.load("source", scheme)
    except UnknownComponentError:
        if scheme in DATA_SCHEMES:
            raise DataError(f"{key} {value!r} is {needs}: install sigmann-data to {_NEEDS[needs]}") from None
        installed = ", ".join(sorted(n for c in plugins.components("source") for n in (c.name, *c.aliases))) or "none"
        raise DataError(f"{key} {value!r}: no source for {scheme!r} URLs is installed "
                        f"(installed sources: {installed})") from None
    return source(value, md5=md5, sha256=sha256)

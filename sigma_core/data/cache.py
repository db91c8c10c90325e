"""Where downloaded, unpacked and block-cached data lives, and how it is written safely.

Everything the data path stores goes under :func:`data_dir`: ``SIGMA_DATA_DIR``
when set, else the user cache directory (``platformdirs``), so runs share
downloads without writing into the working directory.

Files and folders are written under a temporary name beside their final path
and renamed into place only when complete (:func:`atomic_file`,
:func:`atomic_dir`). A rename is atomic on one file system, so a crash, a
failed download or a failed extraction leaves at most a ``*.partial-*`` leftover,
never a final path that a later run would trust.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import platformdirs

PARTIAL = ".partial-"


def data_dir() -> Path:
    """The root folder for Sigma's data files (created on first use)."""
    root = os.environ.get("SIGMA_DATA_DIR") or platformdirs.user_cache_dir("sigmann")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _partial_name(final: Path) -> Path:
    return final.with_name(f"{final.name}{PARTIAL}{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def atomic_file(final: Path) -> Iterator[Path]:
    """Yield a temporary path to write; it becomes ``final`` only if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial_name(final)
    try:
        yield partial
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary folder to fill; it replaces ``final`` only if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial_name(final)
    partial.mkdir()
    try:
        yield partial
        if final.exists():  # a stale copy (e.g. a cache being rebuilt) gives way to the new one
            shutil.rmtree(final)
        os.replace(partial, final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)

"""The image-folder extractor: one subfolder per class, one image per record.

``root/cat/1.png, root/dog/7.jpg, ...`` gives ``inputs`` (N, height, width[,
channels]) uint8 and integer ``targets``, classes numbered by sorted folder
name. Each image is read by :func:`sigmann_images.decode.decode` (a damaged
file or a decompression bomb is one line naming it); a folder that cannot be
listed is one line too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sigma_core import DataError, Dataset

from . import IMAGE_SUFFIXES
from .decode import decode, pillow


def load_image_folder(path, *, size: Sequence[int] | None = None, mode: str = "L") -> Dataset:
    """Every image under ``path/<class>/``, converted to ``mode`` ("L", "RGB", ...).

    Images must share one size unless ``size = [width, height]`` resizes them.
    Label ``i`` is the ``i``-th class folder in sorted order.
    """
    pillow()  # before any folder is listed: without Pillow, say how to install it
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"image folder not found: {root}")
    classes = sorted(entry.name for entry in _listing(root) if entry.is_dir())
    if not classes:
        raise DataError(f"image folder {root} has no class subfolders")
    images, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted(_listing(root / name)):
            if file.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            array = decode(file, mode, size)
            if images and array.shape != images[0].shape:
                raise DataError(f"image {file} is {array.shape}, but earlier images are {images[0].shape}; "
                                f"give size = [width, height] to resize them")
            images.append(array)
            labels.append(label)
    if not images:
        raise DataError(f"image folder {root} has no images in {', '.join(classes)}")
    return Dataset({"inputs": np.stack(images), "targets": np.array(labels, dtype=np.int64)}, root.name)


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError as error:
        raise DataError(f"image folder {folder}: cannot list it ({error.strerror or error})") from None

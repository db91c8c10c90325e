"""The image-folder extractor: one subfolder per class, one image per record.

``root/cat/1.png, root/dog/7.jpg, ...`` gives ``inputs`` (N, height, width[,
channels]) uint8 and integer ``targets``, classes numbered by sorted folder
name. Pillow is imported only when a folder is read; should it be missing
(a broken install), the error says how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sigma_core import DataError, Dataset

from . import IMAGE_SUFFIXES


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise DataError("the image-folder extractor needs Pillow: pip install Pillow") from None
    return Image


def load_image_folder(path, *, size: Sequence[int] | None = None, mode: str = "L") -> Dataset:
    """Every image under ``path/<class>/``, converted to ``mode`` ("L", "RGB", ...).

    Images must share one size unless ``size = [width, height]`` resizes them.
    Label ``i`` is the ``i``-th class folder in sorted order.
    """
    Image = _pillow()
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"image folder not found: {root}")
    classes = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    if not classes:
        raise DataError(f"image folder {root} has no class subfolders")
    images, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted((root / name).iterdir()):
            if file.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            try:
                with Image.open(file) as image:
                    image = image.convert(mode)
                    if size is not None:
                        image = image.resize(tuple(size))
                    array = np.asarray(image)
            except OSError as error:
                raise DataError(f"cannot read image {file}: {error}") from None
            if images and array.shape != images[0].shape:
                raise DataError(f"image {file} is {array.shape}, but earlier images are {images[0].shape}; "
                                f"give size = [width, height] to resize them")
            images.append(array)
            labels.append(label)
    if not images:
        raise DataError(f"image folder {root} has no images in {', '.join(classes)}")
    return Dataset({"inputs": np.stack(images), "targets": np.array(labels, dtype=np.int64)}, root.name)

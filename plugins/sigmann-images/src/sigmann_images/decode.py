"""One image file as a NumPy array, read safely: what both the extractor and ``sigma predict`` decode with.

An image file says how big it is in its header, and a small file can claim a
huge image: a 400 KB PNG of 20,000 × 20,000 pixels decodes to 1.2 GB (a
decompression bomb). Pillow's ``Image.open`` reads only the header, so the
pixel count is held against :data:`MAX_PIXELS` and the memory available
before anything is decoded. A file Pillow cannot read, or whose data is
damaged, is one :class:`~sigma_core.DataError` naming it. Pillow is imported
only when an image is read; should it be missing (a broken install), the
error says how to install it.
"""

from __future__ import annotations

import io
import os
import struct
import warnings
import zlib
from collections.abc import Sequence

import numpy as np

from sigma_core import DataError, check_readable, require_memory

#: The most pixels an image may have: Pillow's own ceiling for trusting a file (``Image.MAX_IMAGE_PIXELS``,
#: 89,478,485), a 9,459 × 9,459 square.
MAX_PIXELS = 89_478_485


def pillow():
    """Pillow's ``Image`` module, or a DataError saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading images needs Pillow: pip install Pillow") from None
    return Image


#: What a damaged header or damaged data raises from Pillow's many decoders.
DAMAGED = (OSError, ValueError, SyntaxError, EOFError, struct.error, zlib.error)
REFUSED = "refused before decoding (a damaged file, or a decompression bomb)"


def decode(path, mode: str, size: Sequence[int] | None = None) -> np.ndarray:
    """The image at ``path`` converted to ``mode`` ("L", "RGB", ...) and, with ``size = (width, height)``, resized:
    (height, width) or (height, width, channels) uint8."""
    Image = pillow()
    try:
        channels = Image.getmodebands(mode)
    except (KeyError, ValueError):
        raise DataError(f"{path}: image mode {mode!r} is not one of Pillow's (L, RGB, RGBA, ...)") from None
    check_readable(path, DataError, "image")
    try:
        stream = _Capped(path)
    except OSError as error:
        raise DataError(f"{path}: cannot read it ({error.strerror or error})") from None
    with stream, warnings.catch_warnings():  # a damaged file's warnings (TIFF tags, EXIF): lines beside the one
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(stream)  # the header only
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:  # Pillow's own ceiling
            raise DataError(f"{path}: {str(error).rstrip('.')}: {REFUSED}") from None
        except DAMAGED as error:
            raise DataError(f"{path}: cannot read it as an image ({error})") from None
        with image:
            width, height = image.size
            if width * height > MAX_PIXELS:  # Pillow's ceiling is a setting that may be off: this one is not
                raise DataError(f"{path}: an image of {width:,} × {height:,} pixels, more than the {MAX_PIXELS:,} an "
                                f"image may have: {REFUSED}")
            require_memory(width * height * max(channels, len(image.getbands())),
                           f"{path}: an image of {width} × {height}", DataError)
            try:
                image = image.convert(mode)
                return np.asarray(image if size is None else image.resize(tuple(size)))
            except DAMAGED as error:
                raise DataError(f"{path}: cannot read it as an image ({error})") from None


class _Capped(io.BufferedReader):
    """A file whose reads never ask for more bytes than it has left. Pillow reads what a header claims (it skips
    the rest of a PNG's data with one read of the length a chunk claims), and Python makes a buffer of the size
    asked before reading: a damaged length of 2 GB would be a 2 GB buffer, for a file of a hundred bytes."""

    def __init__(self, path):
        super().__init__(io.FileIO(path, "rb"))
        self.size = os.fstat(self.fileno()).st_size

    def read(self, size=-1):
        if size is not None and size > 0:
            size = min(size, max(self.size - self.tell(), 0))
        return super().read(size)

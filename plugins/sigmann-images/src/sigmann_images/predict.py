"""``sigma predict`` on image files: read with Pillow and fitted to the network's input.

The pixels come out raw, as the run's data extractor gave them (0..255); the
network's saved preprocessing (``network.preprocessing``, statistics fitted in
training) then changes them as it changed the training data.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sigma_core import SigmaError

from .decode import decode

MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # Pillow's mode for a number of channels


def read_image(path, *, network) -> np.ndarray:
    """One record: the image converted and resized to the network's input, (pixels,) of a square greyscale image,
    (height, width) greyscale or (height, width, 1 | 3 | 4) channels; raw pixels."""
    path = Path(path)
    shape = next(layer.output_shape for layer in network.layers.values() if not layer.input_shapes)
    side = math.isqrt(shape[0])
    height, width, mode = {1: (side, side, "L"), 2: (*shape, "L")}.get(len(shape), (*shape[:2], MODES.get(shape[-1])))
    if mode is None or height * width * len(mode) != math.prod(shape):
        raise SigmaError(f"{path}: images need a network input of (pixels of a square,), (height, width) or "
                         f"(height, width, 1 | 3 | 4 channels); this network takes {shape}")
    return decode(path, mode, (width, height)).astype(np.float64).reshape(1, *shape)

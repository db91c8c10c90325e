"""``sigma predict`` on image files: read with Pillow, fitted to the network's input, preprocessed as in training.

A network trained on pixels expects them as its run's data extractor gave them
and its ``preprocess`` transforms changed them; an image file given to ``sigma
predict`` gets the same treatment here. Adaptive transforms (normalise without an
``input_range``, standardise) took their statistics from the training data,
which a checkpoint does not hold, so they are refused with a way out.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sigma_core import Dataset, Preprocessing, SigmaError

from .decode import decode

MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # Pillow's mode for a number of channels


def read_image(path, *, network, preprocessing: Preprocessing) -> np.ndarray:
    """One record: the image converted and resized to the network's input, (pixels,) of a square greyscale image,
    (height, width) greyscale or (height, width, 1 | 3 | 4) channels; then the run's preprocessing."""
    path = Path(path)
    shape = next(layer.output_shape for layer in network.layers.values() if not layer.input_shapes)
    side = math.isqrt(shape[0])
    height, width, mode = {1: (side, side, "L"), 2: (*shape, "L")}.get(len(shape), (*shape[:2], MODES.get(shape[-1])))
    if mode is None or height * width * len(mode) != math.prod(shape):
        raise SigmaError(f"{path}: images need a network input of (pixels of a square,), (height, width) or "
                         f"(height, width, 1 | 3 | 4 channels); this network takes {shape}")
    if preprocessing.adaptive:
        raise SigmaError(f"{path}: the run's preprocess transform {preprocessing.adaptive[0]!r} was fitted to its training "
                         "data, which the checkpoint does not hold; give normalise an input_range, or predict on arrays")
    pixels = decode(path, mode, (width, height)).astype(np.float64).reshape(shape)
    return preprocessing(Dataset({"inputs": pixels[None]}, path.name)).section("inputs")

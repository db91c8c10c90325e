"""Inputs as pictures: which inputs are images, a Gaussian blur of them, and a grid of them in one PNG."""

import math

import numpy


def image_shape(input_shape) -> tuple | None:
    """``(height, width)`` of an input of ``input_shape`` seen as a grey image: a 2-D input, or a flat one whose
    size is a square of at least 4x4 (sklearn's 64 digits pixels, 784 of a flattened MNIST); None: not an image."""
    shape = tuple(input_shape)
    if len(shape) == 2:
        return shape
    side = math.isqrt(shape[0]) if len(shape) == 1 else 0
    return (side, side) if side >= 4 and side * side == shape[0] else None


def blurred(records, sigma: float, shape) -> numpy.ndarray:
    """``records`` (one per row) each blurred as an image of ``shape`` by a Gaussian of ``sigma`` pixels (separable,
    edges repeated), in their own shape."""
    radius = max(1, math.ceil(3 * sigma))
    kernel = numpy.exp(-0.5 * (numpy.arange(-radius, radius + 1) / sigma) ** 2)
    kernel /= kernel.sum()
    images = records.reshape(len(records), *shape)
    for axis in (1, 2):
        padded = numpy.pad(images, [(radius, radius) if a == axis else (0, 0) for a in range(3)], mode="edge")
        images = sum(w * numpy.take(padded, range(i, i + shape[axis - 1]), axis=axis) for i, w in enumerate(kernel))
    return images.reshape(records.shape)


def write_grid(images, shape, path, columns: int = 10, scale: int = 4) -> None:
    """Save ``images`` (records of ``shape``, grey) side by side in rows of ``columns`` as a PNG, each pixel
    ``scale`` pixels wide; each image's lowest value black, its highest white (one faint image stays readable)."""
    from PIL import Image

    images = numpy.asarray(images, dtype=float).reshape(len(images), *shape)
    low, high = images.min(axis=(1, 2), keepdims=True), images.max(axis=(1, 2), keepdims=True)
    grey = (images - low) / numpy.where(high > low, high - low, 1.0)
    rows, (height, width) = math.ceil(len(grey) / columns), shape
    canvas = numpy.ones(((height + 1) * rows + 1, (width + 1) * min(columns, len(grey)) + 1))  # white lines between
    for index, image in enumerate(grey):
        top, left = 1 + (index // columns) * (height + 1), 1 + (index % columns) * (width + 1)
        canvas[top:top + height, left:left + width] = image
    picture = (canvas * 255).round().astype(numpy.uint8).repeat(scale, axis=0).repeat(scale, axis=1)
    Image.fromarray(picture, mode="L").save(path)


def write_dreams(results, input_shape, path):
    """Save dreamed inputs (:class:`~sigmann_debug.dream.DreamResult`) at ``path`` with its suffix replaced: a PNG
    grid, one per target in order, where the inputs are images, else a ``.npy`` of them stacked. Returns the path."""
    from pathlib import Path

    shape, stacked = image_shape(input_shape), numpy.stack([result.inputs for result in results])
    path = Path(path).with_suffix(".png" if shape is not None else ".npy")
    if shape is not None:
        write_grid(stacked, shape, path)
    else:
        numpy.save(path, stacked)
    return path

"""A drawing's strokes as the image a digit network was trained on, prepared as MNIST's digits were.

MNIST's digits were scaled, keeping their aspect ratio, to fit a 20×20 box,
then placed in the 28×28 field so that their centre of mass lies at its
centre. A drawing on the page is its strokes (the points the pointer passed),
at whatever size it was drawn: here the strokes are scaled into that box
first and only then given their ink, a pen :data:`PEN` of the box wide, so a
small drawing gets the same thin lines as a large one, never a thick blob.
Grids smaller than 16 pixels (scikit-learn's 8×8 digits) are filled edge to
edge and centred by their bounding box, as those digits were.
"""

from __future__ import annotations

import math

import numpy

from sigma_core import ConfigError

#: The box a digit is fitted into, as a fraction of the grid: MNIST's 20 of 28.
BOX = 20 / 28
#: The pen's width as a fraction of the box (MNIST's strokes are some 2 to 3 pixels of the 20).
PEN = 0.12
#: Sample points along the grid's longer side when inking, at least one a pixel (anti-aliasing: a pixel's ink
#: is the share of its samples the pen covers): 4 a pixel of MNIST's 28.
SAMPLED = 112
#: Distances computed at once (points along the strokes × the samples within the pen's reach of each), which
#: bounds the memory inking takes.
DISTANCES = 1 << 20
#: The most points a drawing may have (a drawing on the page has some hundreds), which bounds the time it takes.
MAX_POINTS = 2000


def strokes_array(strokes) -> list[numpy.ndarray]:
    """The strokes of a request, each ``[x0, y0, x1, y1, ...]`` (any units: the page sends canvas pixels), as
    (points, 2) arrays; anything else is a :class:`ConfigError`."""
    if not (isinstance(strokes, list) and strokes and all(
            isinstance(stroke, list) and stroke and len(stroke) % 2 == 0
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in stroke) for stroke in strokes)):
        raise ConfigError("strokes must be a non-empty array of strokes, each an array of x, y numbers "
                          "([x0, y0, x1, y1, ...])")
    if (points := sum(len(stroke) for stroke in strokes) // 2) > MAX_POINTS:
        raise ConfigError(f"strokes: at most {MAX_POINTS} points, got {points}")
    arrays = [numpy.asarray(stroke, dtype=numpy.float64).reshape(-1, 2) for stroke in strokes]
    if not all(numpy.isfinite(points).all() for points in arrays):
        raise ConfigError("strokes must hold finite numbers")
    return arrays


def digit_image(strokes: list[numpy.ndarray], shape: tuple[int, int]) -> numpy.ndarray:
    """The (height, width) image in [0, 1] (0 blank, 1 ink) of ``strokes`` (from :func:`strokes_array`)."""
    height, width = shape
    mnist = min(shape) >= 16
    box = min(shape) * (BOX if mnist else 1.0)
    pen = max(1.0, PEN * box)
    points = numpy.concatenate(strokes)
    low, high = points.min(axis=0), points.max(axis=0)
    extent = float((high - low).max())
    scale = (box - pen) / extent if extent > 0 else 0.0  # a dot stays a dot of the pen's width
    centre = numpy.array([width / 2, height / 2])
    placed = [(stroke - (low + high) / 2) * scale + centre for stroke in strokes]
    image = _ink(placed, shape, pen)
    if mnist and image.sum() > 0:  # then move the centre of mass to the centre (to within a sample's spacing)
        rows, columns = numpy.indices(shape) + 0.5
        mass = numpy.array([(image * columns).sum(), (image * rows).sum()]) / image.sum()
        image = _ink([stroke + centre - mass for stroke in placed], shape, pen)
    return image


def _ink(strokes: list[numpy.ndarray], shape: tuple[int, int], pen: float) -> numpy.ndarray:
    """Each pixel's share of its sample points within ``pen / 2`` of a stroke (a lone point: a dot).

    The strokes are walked in steps of half a sample's spacing, and each step inks the samples within the pen's
    reach of it: work in proportion to the strokes' length, never to the grid's area times their points.
    """
    height, width = shape
    per_pixel = max(1, SAMPLED // max(shape))
    # in sample units, sample (i, j) at (i, j): a pixel's samples sit evenly inside it
    path = numpy.concatenate([_walk(stroke, 0.5 / per_pixel) for stroke in strokes]) * per_pixel - 0.5
    radius = pen / 2 * per_pixel
    reach = numpy.arange(-math.ceil(radius), math.ceil(radius) + 1)
    offsets = numpy.stack(numpy.meshgrid(reach, reach), axis=-1).reshape(-1, 2)
    covered = numpy.zeros((height * per_pixel, width * per_pixel), dtype=bool)
    chunk = max(1, DISTANCES // len(offsets))
    for first in range(0, len(path), chunk):
        points = path[first:first + chunk]
        candidates = numpy.round(points)[:, None, :] + offsets  # (points, offsets, x and y)
        near = ((candidates - points[:, None, :]) ** 2).sum(axis=2) <= radius ** 2
        x, y = candidates[near].astype(numpy.int64).T
        inside = (x >= 0) & (x < covered.shape[1]) & (y >= 0) & (y < covered.shape[0])
        covered[y[inside], x[inside]] = True
    return covered.reshape(height, per_pixel, width, per_pixel).mean(axis=(1, 3))


def _walk(stroke: numpy.ndarray, step: float) -> numpy.ndarray:
    """Points along ``stroke`` (its own, and between them) at most ``step`` apart."""
    if len(stroke) == 1:
        return stroke
    starts, moves = stroke[:-1], numpy.diff(stroke, axis=0)
    counts = numpy.maximum(1, numpy.ceil(numpy.hypot(*moves.T) / step)).astype(numpy.int64)
    segment = numpy.repeat(numpy.arange(len(starts)), counts)
    fraction = (numpy.arange(counts.sum()) - numpy.repeat(numpy.cumsum(counts) - counts, counts)) / counts[segment]
    return numpy.concatenate([starts[segment] + fraction[:, None] * moves[segment], stroke[-1:]])

"""What the debug handler looks for in every array an op makes, and how it says what it found.

Each check runs on every op of every step, so the common case (nothing wrong) costs one reduction: a sum is NaN or
infinite when an element is (or when finite elements overflow it), and only then is the array searched element by
element, on the host, to name the first bad one.
"""

import math
from dataclasses import dataclass

import numpy

from sigma_core import ShapeError, SigmaError

class BadValue(SigmaError, FloatingPointError):
    """An op made a NaN, an infinity or a value above the limit. Not the core's ``NonFiniteError``, to which the
    trainer adds a guess at the cause (the batch, a parameter grown too large): this report names the cause."""


@dataclass(frozen=True)
class Checks:
    """The debug handler's settings (the ``debug`` hook's keys). ``shapes``: a float output of an op has the
    handler's dtype, and each gradient its VJP returns has its input's shape and the handler's dtype. ``limit``:
    an element whose magnitude is above it is a problem (None: no limit). ``throw``: the first problem stops the
    run; False: it is logged and counted, and training goes on."""

    nan: bool = True
    inf: bool = True
    shapes: bool = True
    limit: float | None = None
    throw: bool = True

    def problem(self, k, raw, shape=None) -> tuple[type, str] | None:
        """What is wrong with ``raw``, a raw array of the kernels ``k`` (``shape``: the one it must have): the error
        to raise and a few words naming the first bad element; None when nothing is."""
        if getattr(raw, "dtype", None) is None or raw.dtype.kind != "f":
            return None  # integer and boolean results (labels, masks) hold no NaN
        if self.shapes and (raw.dtype != k.dtype or (shape is not None and raw.shape != shape)):
            return ShapeError, f"a {raw.dtype} array of shape {raw.shape}, not {k.dtype} of shape {shape or raw.shape}"
        if (self.nan or self.inf) and not math.isfinite(k.xp.sum(raw)):
            host = k.to_host(raw)
            bad = (numpy.isnan(host) if self.nan else False) | (numpy.isinf(host) if self.inf else False)
            found = _first(host, bad)
            if found:
                return BadValue, found  # else finite elements overflowed the sum
        if self.limit is not None and raw.size and float(k.xp.max(k.xp.abs(raw))) > self.limit:
            host = k.to_host(raw)
            return BadValue, f"{_first(host, numpy.abs(host) > self.limit)}, above the limit {self.limit:g}"
        return None


def _first(host, bad) -> str | None:
    """``"nan at index [1, 2]"``: the first element of ``host`` where the mask ``bad`` holds; None if nowhere."""
    if not numpy.any(bad):
        return None
    index = numpy.unravel_index(numpy.argmax(bad), host.shape)
    return f"{host[index]} at index {[int(i) for i in index]}"


#: The keys of the ``debug`` hook and the rules its table is held to (:mod:`sigma_core.config`).
RULES = {"nan": "bool", "inf": "bool", "shapes": "bool", "limit": "real > 0 or null", "throw": "bool"}

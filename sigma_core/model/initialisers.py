"""Weight initialisers, and binding them to parameters by name pattern.

An initialiser fills a parameter in place through its handler; random ones draw from the handler's generator,
so a handler seed reproduces them. Parameters are bound by fnmatch globs on their ids (``"*.weights"``,
``"2-dense.weights"``); when several match one id the most specific wins (:func:`specificity`), as in Sigma.
"""

import fnmatch
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy

from sigma_core.errors import ConfigError, ShapeError


class Initialiser:
    """Base class: :meth:`initialise` fills ``array`` in place."""

    def initialise(self, handler, array) -> None:
        raise NotImplementedError


@dataclass
class Constant(Initialiser):
    value: float = 0.0

    def initialise(self, handler, array):
        handler.fill(array, self.value)


@dataclass
class Gaussian(Initialiser):
    std: float = 1.0
    mean: float = 0.0

    def initialise(self, handler, array):
        handler.fill(array, handler.normal(array.shape, self.mean, self.std))


@dataclass
class Uniform(Initialiser):
    """Uniform draws in [low, high)."""

    low: float
    high: float

    def initialise(self, handler, array):
        handler.fill(array, handler.uniform(array.shape, self.low, self.high))


@dataclass
class Xavier(Initialiser):
    """Glorot & Bengio (2010), uniform: ±gain·√(6 / (fan_in + fan_out)) (Sigma's drew N(0, scale/size))."""

    gain: float = 1.0

    def initialise(self, handler, array):
        limit = self.gain * math.sqrt(6.0 / sum(fans(array.shape)))
        handler.fill(array, handler.uniform(array.shape, -limit, limit))


@dataclass
class He(Initialiser):
    """He et al. (2015), normal: std = √(2 / fan_in), for ReLU layers."""

    def initialise(self, handler, array):
        handler.fill(array, handler.normal(array.shape, 0.0, math.sqrt(2.0 / fans(array.shape)[0])))


@dataclass
class Custom(Initialiser):
    """``fn(shape, rng) -> NumPy array`` of that shape, ``rng`` a NumPy Generator seeded from the handler's
    own generator, so that a handler seed reproduces it too, on any backend."""

    fn: Callable

    def initialise(self, handler, array):
        # Four float draws keep 24 random bits each even in float32: 96 bits of seed.
        draws = handler.uniform((4,)).to_numpy()
        values = numpy.asarray(self.fn(array.shape, numpy.random.default_rng((draws * 2**24).astype(numpy.uint32))))
        if values.shape != array.shape:
            raise ShapeError(f"custom initialiser {self.fn!r} returned shape {values.shape}, expected {array.shape}")
        handler.fill(array, handler.asarray(values))


def fans(shape) -> tuple[int, int]:
    """(fan_in, fan_out) of a parameter shape: (inputs, outputs), after a receptive field whose size multiplies
    both in more axes (channels-last convolution kernels); a 1-D (or 0-D) parameter's size for both."""
    if len(shape) < 2:
        return math.prod(shape), math.prod(shape)
    receptive = math.prod(shape[:-2])
    return receptive * shape[-2], receptive * shape[-1]


def specificity(pattern: str) -> tuple[int, int]:
    """Sort key for a glob, larger for more specific: fewer wildcards, then more literal characters.

    So ``"2-dense.weights"`` > ``"*-dense.weights"`` > ``"*.weights"`` > ``"*"``.
    """
    wildcards = re.findall(r"[*?]|\[.[^\]]*\]", pattern, re.S)  # as in fnmatch, "[]...]" has "]" as a member
    return -len(wildcards), len(pattern) - sum(map(len, wildcards))


def apply_initialisers(handler, params: dict, bindings: dict) -> dict[str, str]:
    """Initialise ``params`` (id -> NDArray) from ``bindings`` (glob -> Initialiser); return ``{id: pattern}``.

    Each parameter is initialised once, by the most specific matching pattern (of equally specific ones, the
    later binding); unmatched ones are left alone, and a pattern that matches nothing is refused.
    """
    check_patterns(bindings, params, "initialiser")
    winners = {}
    for pattern in sorted(bindings, key=specificity):  # stable: equal specificity keeps binding order
        winners.update((param_id, pattern) for param_id in params if fnmatch.fnmatchcase(param_id, pattern))
    for param_id, pattern in winners.items():
        bindings[pattern].initialise(handler, params[param_id])
    return winners


def check_patterns(patterns, ids, what: str) -> None:
    """A glob that matches no parameter id is almost always a typo: a :class:`ConfigError` naming ``what``."""
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
            raise ConfigError(f"{what}: pattern {pattern!r} matches no parameter "
                              f"(parameters: {', '.join(ids) or 'none'})")


"""Weight initialisers, and binding them to parameters by name pattern.

An initialiser fills a parameter in place through its handler; random ones
draw from the handler's generator, so a handler seed reproduces them.

Parameters are bound to initialisers by fnmatch globs on their ids
(``"*.weights"``, ``"2-dense.weights"``). When several patterns match one id
the most specific wins, as in Sigma's trainer (which sorted patterns with
``CompareIdentifierSpecificityAscending`` and applied the least specific
first); see :func:`specificity`.
"""

from __future__ import annotations

import fnmatch
import math

import numpy

from sigma_core import plugins
from sigma_core.errors import ConfigError, ShapeError


class Initialiser:
    """Base class: :meth:`initialise` fills ``array`` in place."""

    def initialise(self, handler, array) -> None:
        raise NotImplementedError

    def __repr__(self):
        arguments = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({arguments})"


class Constant(Initialiser):
    """Every element set to ``value``."""

    def __init__(self, value=0.0):
        self.value = value

    def initialise(self, handler, array):
        handler.fill(array, self.value)


class Gaussian(Initialiser):
    """Normal draws with standard deviation ``std`` around ``mean``."""

    def __init__(self, std=1.0, mean=0.0):
        self.std = std
        self.mean = mean

    def initialise(self, handler, array):
        handler.fill(array, handler.normal(array.shape, self.mean, self.std))


class Uniform(Initialiser):
    """Uniform draws in [low, high)."""

    def __init__(self, low, high):
        self.low = low
        self.high = high

    def initialise(self, handler, array):
        handler.fill(array, handler.uniform(array.shape, self.low, self.high))


class Xavier(Initialiser):
    """Glorot & Bengio (2010), uniform: ±gain·√(6 / (fan_in + fan_out)).

    Sigma's ``XavierInitialiser`` drew N(0, scale/prod(shape)), which is not
    Glorot's rule; this is the usual one. Fans come from :func:`fans`.
    """

    def __init__(self, gain=1.0):
        self.gain = gain

    def initialise(self, handler, array):
        fan_in, fan_out = fans(array.shape)
        limit = self.gain * math.sqrt(6.0 / (fan_in + fan_out))
        handler.fill(array, handler.uniform(array.shape, -limit, limit))


class He(Initialiser):
    """He et al. (2015), normal: std = √(2 / fan_in), for ReLU layers."""

    def initialise(self, handler, array):
        fan_in, _ = fans(array.shape)
        handler.fill(array, handler.normal(array.shape, 0.0, math.sqrt(2.0 / fan_in)))


class Custom(Initialiser):
    """``fn(shape, rng) -> NumPy array`` of that shape, ``rng`` a NumPy Generator.

    The generator is seeded from draws of the handler's own generator, so a
    handler seed reproduces a custom initialiser too, on any backend.
    """

    def __init__(self, fn):
        self.fn = fn

    def initialise(self, handler, array):
        # Four float draws keep 24 random bits each even in float32: 96 bits of seed.
        draws = handler.uniform((4,)).to_numpy()
        rng = numpy.random.default_rng((draws * 2**24).astype(numpy.uint32))
        values = numpy.asarray(self.fn(array.shape, rng))
        if values.shape != array.shape:
            raise ShapeError(f"custom initialiser {self.fn!r} returned shape {values.shape}, expected {array.shape}")
        handler.fill(array, handler.asarray(values))


def fans(shape) -> tuple[int, int]:
    """(fan_in, fan_out) of a parameter shape.

    A 2-D weight is (inputs, outputs). More axes are a receptive field
    followed by (inputs, outputs), as in channels-last convolution kernels,
    and the receptive field size multiplies both fans. A 1-D (or 0-D)
    parameter uses its size for both.
    """
    shape = tuple(shape)
    if len(shape) < 2:
        size = math.prod(shape)
        return size, size
    receptive = math.prod(shape[:-2])
    return receptive * shape[-2], receptive * shape[-1]


# -- binding initialisers to parameters ------------------------------------------------------


def specificity(pattern: str) -> tuple[int, int]:
    """Sort key for a glob: larger means more specific.

    Fewer wildcards (``*``, ``?``, a ``[...]`` class) is more specific; among
    patterns with as many wildcards, more literal characters is more specific.
    So ``"2-dense.weights"`` > ``"*-dense.weights"`` > ``"*.weights"`` > ``"*"``.
    """
    wildcards = literals = 0
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char in "*?":
            wildcards += 1
        elif char == "[" and pattern.find("]", i + 2) != -1:
            wildcards += 1
            i = pattern.find("]", i + 2)  # as in fnmatch, a "]" right after "[" is a member
        else:
            literals += 1
        i += 1
    return -wildcards, literals


def apply_initialisers(handler, params: dict, bindings: dict) -> dict[str, str]:
    """Initialise ``params`` (id -> NDArray) from ``bindings`` (glob -> Initialiser).

    Each parameter is initialised once, by the most specific matching pattern
    (:func:`specificity`; between equally specific patterns the later binding
    wins), which is what applying the least specific patterns first would
    leave. Parameters no pattern matches are left alone. Returns
    ``{param_id: pattern}`` for every initialised parameter.

    A pattern that matches no parameter is a :class:`ConfigError`: it is
    almost always a typo, and silently skipping it would train from the
    wrong initial weights.
    """
    ids = list(params)
    check_patterns(bindings, ids, "initialiser")
    winners = {}
    for pattern in sorted(bindings, key=specificity):  # stable: equal specificity keeps binding order
        for param_id in ids:
            if fnmatch.fnmatchcase(param_id, pattern):
                winners[param_id] = pattern
    for param_id, pattern in winners.items():
        bindings[pattern].initialise(handler, params[param_id])
    return winners


def check_patterns(patterns, ids, what: str) -> None:
    """A glob that matches no parameter id is almost always a typo: a :class:`ConfigError` naming ``what``."""
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
            raise ConfigError(f"{what}: pattern {pattern!r} matches no parameter (parameters: {', '.join(ids) or 'none'})")


def initialiser_from_config(config: dict) -> Initialiser:
    """Build a registered initialiser from ``{"type": name, **constructor arguments}``.

    For example ``{"type": "gaussian", "std": 0.1}``; see :func:`sigma_core.plugins.build`.
    """
    return plugins.build("initialiser", config)

"""Tiny hand-written and random datasets, for smoke tests, examples and benchmarks."""

from __future__ import annotations

import numpy as np

from sigma_core.data.dataset import Dataset

_BOOLEAN_INPUTS = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float64)


def xor() -> Dataset:
    """The four XOR cases: ``inputs`` (4, 2), ``targets`` (4, 1), both float."""
    return Dataset({"inputs": _BOOLEAN_INPUTS.copy(), "targets": np.array([[0.0], [1.0], [1.0], [0.0]])}, "xor")


def and_() -> Dataset:
    """The four AND cases: ``inputs`` (4, 2), ``targets`` (4, 1), both float."""
    return Dataset({"inputs": _BOOLEAN_INPUTS.copy(), "targets": np.array([[0.0], [0.0], [0.0], [1.0]])}, "and")


def synthetic_classification(n: int, shape: tuple[int, ...] | int, classes: int, seed: int = 0) -> Dataset:
    """``n`` standard-normal float32 ``inputs`` of ``shape`` with uniformly random integer ``targets``.

    There is nothing to learn: this exists to time the training loop on data
    of a chosen size without reading files.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((n, *shape), dtype=np.float32)
    targets = rng.integers(0, classes, size=n, dtype=np.int64)
    return Dataset({"inputs": inputs, "targets": targets}, "synthetic")


synthetic_classification.argument_rules = {"n": "int >= 1", "shape": "shape", "classes": "int >= 1"}  # see sigma_core.arguments

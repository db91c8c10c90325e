"""Tiny hand-written and random datasets, for smoke tests, examples and benchmarks."""

import numpy as np

from sigma_core.data.dataset import Dataset


def _truth_table(name: str, outputs: list[float]) -> Dataset:
    inputs = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float64)
    return Dataset({"inputs": inputs, "targets": np.array(outputs, dtype=np.float64)[:, None]}, name)


def xor() -> Dataset:
    """The four XOR cases: ``inputs`` (4, 2), ``targets`` (4, 1), both float."""
    return _truth_table("xor", [0, 1, 1, 0])


def and_() -> Dataset:
    """The four AND cases: ``inputs`` (4, 2), ``targets`` (4, 1), both float."""
    return _truth_table("and", [0, 0, 0, 1])


def synthetic_classification(n: int, shape: tuple[int, ...] | int, classes: int, seed: int = 0) -> Dataset:
    """``n`` standard-normal float32 ``inputs`` of ``shape`` with uniformly random integer ``targets``: nothing to
    learn, it times the training loop on data of a chosen size without reading files."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((n, *shape), dtype=np.float32)
    return Dataset({"inputs": inputs, "targets": rng.integers(0, classes, size=n, dtype=np.int64)}, "synthetic")


# see sigma_core.config
synthetic_classification.argument_rules = {"n": "int >= 1", "shape": "shape", "classes": "int >= 1"}

"""The pytest plugin (entry point group ``pytest11``), loaded in every pytest session once sigmann-testing is installed.

It offers the ``sigma_handlers``, ``sigma_run_file``, ``close`` and ``taped`` fixtures. Being a pytest plugin also has
pytest rewrite the kit's ``assert`` statements, so a failed check shows the
values it compared. Nothing here runs plugin discovery or imports the kit
until a test asks for it: sessions that do not use Sigma pay nothing.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def sigma_handlers() -> list[str]:
    """Names of the installed handlers that can run here, in name order: the ones
    :func:`~sigmann_testing.check_layer` checks by default, so a test can assert it saw them all."""
    from .layers import available_handlers

    return available_handlers()


@pytest.fixture
def close():
    """``close(actual, expected, dtype, depth, what="")``: assert two computations of the same values agree within
    what ``depth`` roundings in ``dtype`` allow (:func:`assert_close`)."""
    return assert_close


@pytest.fixture
def taped():
    """``taped(handler, name, values, seed, watched=None, **params)``: an op's output and input gradients
    (:func:`op_gradients`)."""
    return op_gradients


def assert_close(actual, expected, dtype, depth, what=""):
    """Two computations of the same values in different orders, ``depth`` roundings deep (the terms of the widest
    sum, times the chained steps): each rounding is off by at most eps relative to the largest value involved, and
    independent roundings add up like a random walk, to about √depth of them (×4 for the exp and division of a
    softmax, each within an ulp or two); a wrong formula is off by far more."""
    import math

    import numpy

    bound = float(numpy.finfo(dtype).eps) * math.sqrt(depth) * 4
    scale = max(float(numpy.abs(expected).max(initial=0.0)), 1.0)
    numpy.testing.assert_allclose(actual, expected, rtol=bound, atol=bound * scale, err_msg=what)


def op_gradients(handler, name, values, seed, watched=None, **params):
    """``handler.op(name, *values, **params)`` and the gradients of sum(output · seed) for the inputs at the
    positions ``watched`` (default: all), as NumPy; ``seed`` is an array or ``seed(shape)``."""
    watched = range(len(values)) if watched is None else watched
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        tape.watch(*[arrays[i] for i in watched])
        out = handler.op(name, *arrays, **params)
        grads = tape.gradient(out, [arrays[i] for i in watched],
                              seed=handler.asarray(seed(out.shape) if callable(seed) else seed))
    return out.to_numpy(), [g.to_numpy() for g in grads]


#: The smallest run that still trains, checkpoints and reports: 96 synthetic records in 3 classes, one dense layer,
#: SGD, 2 epochs of 9 steps on numpy. Tests of hooks and commands that need a real run file start from it.
BLOBS_RUN_FILE = """
name = "blobs"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 96
shape = 5
classes = 3
[split]
validation = 0.25
[[network.layers]]
type = "input"
shape = [5]
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[optimiser]
type = "sgd"
learning_rate = 0.1
[training]
batch_size = 8
epochs = 2
prefetch = 0
"""


@pytest.fixture
def sigma_run_file(tmp_path):
    """Write the tiny "blobs" run (:data:`BLOBS_RUN_FILE`) to ``tmp_path/run.toml`` and return its path; called as
    ``sigma_run_file("optimiser.type=adam", ...)``, with ``--set``-style changes, so each test states only how
    its run differs instead of keeping a copy of the whole file."""
    def write(*changes: str):
        import tomllib

        from sigma_core import apply_override
        from sigmann_help import config_toml

        config = tomllib.loads(BLOBS_RUN_FILE)
        for change in changes:
            apply_override(config, change)
        path = tmp_path / "run.toml"
        path.write_text(config_toml(config))
        return path

    return write

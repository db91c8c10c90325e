"""What the attention tests share: the handlers to run on, comparisons within a dtype's precision, taped
gradients, and the PyTorch twin of the GPT (benchmarks/torch_gpt.py, importable here)."""

from __future__ import annotations

import importlib.util
import math
import sys
import tomllib
from pathlib import Path

import numpy
import pytest

from sigmann_help import config_toml

#: The handlers every op and layer is checked on: the reference and the numba one (skipped without numba).
HANDLERS = ["numpy", pytest.param("cpu", marks=pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                                                  reason="the cpu handler needs numba"))]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gpt_chars.toml"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # torch_gpt, the twin


@pytest.fixture(params=HANDLERS)
def handler_name(request):
    """Each handler the test runs on."""
    return request.param


@pytest.fixture
def close():
    return _close


@pytest.fixture
def taped():
    return _taped


def _close(actual, expected, dtype, depth, what=""):
    """Two computations of the same values in different orders, ``depth`` roundings deep (the terms of the widest
    sum, times the chained steps): each rounding is off by at most eps relative to the largest value involved, and
    independent roundings add up like a random walk, to about √depth of them (×4 for the exp and division of a
    softmax, each within an ulp or two); a wrong formula is off by far more."""
    bound = float(numpy.finfo(dtype).eps) * math.sqrt(depth) * 4
    scale = max(float(numpy.abs(expected).max(initial=0.0)), 1.0)
    numpy.testing.assert_allclose(actual, expected, rtol=bound, atol=bound * scale, err_msg=what)


def _taped(handler, name, values, seed, watched=None, **params):
    """``handler.op(name, *values, **params)`` and the gradients of sum(output · seed) for the inputs at the
    positions ``watched`` (default: all), as NumPy."""
    watched = range(len(values)) if watched is None else watched
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        tape.watch(*[arrays[i] for i in watched])
        out = handler.op(name, *arrays, **params)
        grads = tape.gradient(out, [arrays[i] for i in watched], seed=handler.asarray(seed(out.shape)))
    return out.to_numpy(), [g.to_numpy() for g in grads]


@pytest.fixture
def seeded():
    """``seeded(dtype)(shape)``: the same standard-normal draws (an incoming gradient) for Sigma and PyTorch."""
    return lambda dtype: lambda shape: numpy.random.default_rng(7).standard_normal(shape).astype(dtype)


@pytest.fixture
def torch_grads():
    """``torch_grads(fn, values, seed, watched)``: PyTorch's ``fn(*values)`` and the gradients of
    sum(output · seed) for the values at the positions ``watched``, as NumPy."""
    import torch

    def run(fn, values, seed, watched):
        tensors = [torch.tensor(v, requires_grad=i in watched) for i, v in enumerate(values)]
        out = fn(*tensors)
        out.backward(torch.tensor(seed))
        return out.detach().numpy(), [tensors[i].grad.numpy() for i in watched]

    return run


@pytest.fixture
def text_file():
    """``text_file(path, size=3000, alphabet=...)``: writes seeded random text of the alphabet there."""
    return _text_file


@pytest.fixture
def example_run():
    """``example_run(directory, text, layer=None, **changes)``: examples/gpt_chars.toml on ``text``, changed."""
    return _example_run


def _text_file(path, size=3000, alphabet="abcdefgh \n"):
    rng = numpy.random.default_rng(0)
    path.write_text("".join(rng.choice(list(alphabet), size)))
    return path


def _example_run(directory, text, layer=None, **changes):
    """examples/gpt_chars.toml on ``text``, checkpoints in ``directory``, with ``changes`` to the layer named
    ``layer``, written to ``directory/run.toml``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = tomllib.loads(EXAMPLE.read_text())
    config["data"]["path"] = str(text)
    config["checkpoint"]["directory"] = str(directory / "checkpoints")
    for spec in config["network"]["layers"]:
        if spec.get("name") == layer:
            spec.update(changes)
    path = directory / "run.toml"
    path.write_text(config_toml(config))
    return path

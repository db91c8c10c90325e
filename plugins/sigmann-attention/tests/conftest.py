"""What the attention tests share: the handlers to run on, PyTorch's gradients, and the PyTorch twin of the GPT
(benchmarks/torch_gpt.py, importable here); ``close`` and ``taped`` come from sigmann-testing."""

from __future__ import annotations

import importlib.util
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
    """``example_run(directory, text, layer=None, tied=False, **changes)``: examples/gpt_chars.toml on ``text``,
    changed."""
    return _example_run


def _text_file(path, size=3000, alphabet="abcdefgh \n"):
    rng = numpy.random.default_rng(0)
    path.write_text("".join(rng.choice(list(alphabet), size)))
    return path


#: The example's output layer tied to its embedding, as its comment shows.
TIED_LOGITS = {"type": "tied_logits", "name": "logits", "vocabulary": 128}


def _example_run(directory, text, layer=None, tied=False, **changes):
    """examples/gpt_chars.toml on ``text``, checkpoints in ``directory``, with ``changes`` to the layer named
    ``layer`` (after ``tied`` put TIED_LOGITS in place of the logits layer), written to ``directory/run.toml``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = tomllib.loads(EXAMPLE.read_text())
    config["data"]["path"] = str(text)
    config["checkpoint"]["directory"] = str(directory / "checkpoints")
    layers = config["network"]["layers"]
    if tied:
        layers[:] = [dict(TIED_LOGITS) if spec.get("name") == "logits" else spec for spec in layers]
    for spec in config["network"]["layers"]:
        if spec.get("name") == layer:
            spec.update(changes)
    path = directory / "run.toml"
    path.write_text(config_toml(config))
    return path

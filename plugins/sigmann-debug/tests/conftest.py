"""What the debug tests share: an installed distribution whose layer plants a log(0) or a sqrt(-1), and the digits
run file to train with it."""

import copy
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy
import pytest

from sigma_core import validate_run
from sigma_core.plugins import reset

DIGITS = tomllib.loads((Path(__file__).resolve().parents[3] / "examples" / "digits.toml").read_text())

PLANTED = '''
from sigma_core import Layer, Op, hookimpl


class Planted(Layer):
    """Passes its input on, planting ``fn`` ("log": log(0); "sqrt": sqrt(-1); "big": x 1e6) in ``where``
    ("forward": a core op of this layer's forward; "backward": the VJP of the op planted_vjp) from its ``at``-th
    training step on."""

    def __init__(self, name, input_shapes, fn="log", where="forward", at=1):
        super().__init__(name, input_shapes)
        self.fn, self.where, self.at, self.calls = fn, where, at, [0]

    def forward(self, handler, inputs, params, context):
        (x,) = inputs
        self.calls[0] += context.training  # training steps only, not the held-out evaluations
        if self.calls[0] < self.at:
            return handler.copy(x)
        if self.where == "backward":
            return handler.op("planted_vjp", x, fn=self.fn)
        if self.fn == "big":
            return handler.multiply(x, 1e6)
        zero = handler.multiply(x, 0.0)
        return handler.add(x, handler.log(zero) if self.fn == "log" else handler.sqrt(handler.subtract(zero, 1.0)))


class PlantedVJP(Op):
    """The identity, whose VJP multiplies by log(0) or sqrt(-1), or (``fn = "wide"``) adds an axis."""

    def forward(self, k, x, fn):
        return k.xp.array(x, copy=True), None

    def backward(self, k, g, inputs, out, saved, needs, fn):
        if fn == "wide":  # a gradient of another shape than the input's
            return (g[..., None],)
        bad = k.xp.log(k.xp.zeros_like(g)) if fn == "log" else k.xp.sqrt(k.xp.zeros_like(g) - 1.0)
        return (g * bad,)


@hookimpl
def register_layers(register):
    register("planted", Planted)


@hookimpl
def register_ops(register):
    register("planted_vjp", PlantedVJP)
'''


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """The distribution ``planted`` installed (beside every other), found by plugin discovery; NumPy's warnings
    about the NaNs it makes on purpose silenced, as ``sigma train`` silences them."""
    info = tmp_path / "planted-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[sigma]\nplanted = planted_layer\n")
    (tmp_path / "planted_layer.py").write_text(textwrap.dedent(PLANTED))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("SIGMA_PLUGINS", raising=False)
    reset()
    with numpy.errstate(all="ignore"):
        yield
    reset()
    sys.modules.pop("planted_layer", None)


@pytest.fixture
def digits_config():
    """``digits_config(handler, trap=None, epochs=1, **sections)``: see :func:`make_digits_config`."""
    return make_digits_config


def make_digits_config(handler="debug:numpy", trap=None, epochs=1, **sections) -> dict:
    """examples/digits.toml without dropout, on ``handler``, with the ``planted`` layer's table ``trap`` (named
    "trap") after the first dense layer; ``sections`` replace the run file's."""
    raw = copy.deepcopy(DIGITS)
    layers = [layer for layer in raw["network"]["layers"] if layer["type"] != "dropout"]
    if trap is not None:
        layers.insert(2, {"type": "planted", "name": "trap", **trap})
    raw["network"]["layers"] = layers
    raw["handler"] = {"name": handler, "dtype": "float64"}
    raw["training"]["epochs"] = epochs
    raw.update(sections)
    return validate_run(raw)

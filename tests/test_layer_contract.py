"""A plugin layer's declarations are checked against what its forward does: a wrong ``output_shape`` or a
parameter used but never declared is one line naming the layer (exit status 2 at the CLI), not a failure
further on in another layer's matmul or a bare KeyError."""

from __future__ import annotations

import pytest

from sigma_core.cli import main

LAYERS = """
    from sigma_core import Layer, default_weight_initialisers, hookimpl


    class Wide(Layer):  # declares 4 outputs, returns 5
        def __init__(self, name, input_shapes):
            super().__init__(name, input_shapes)
            self.output_shape = (4,)
            self.parameter_shapes = {"weights": (self.input_shape[0], 5)}

        def default_initialisers(self):
            return {"weights": default_weight_initialisers()["weights"]}

        def forward(self, handler, inputs, params, context):
            return inputs[0] @ params["weights"]


    class Undeclared(Layer):  # uses a parameter it never declared
        def __init__(self, name, input_shapes):
            super().__init__(name, input_shapes)
            self.parameter_shapes = {"scale": self.input_shape}

        def forward(self, handler, inputs, params, context):
            return inputs[0] * params["scale"] + params["shift"]


    @hookimpl
    def register_layers(register):
        register("wide", Wide)
        register("undeclared", Undeclared)
"""

RUN_FILE = """
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 32
shape = 5
classes = 3
[[network.layers]]
type = "input"
shape = [5]
[[network.layers]]
type = "{layer}"
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[training]
batch_size = 8
epochs = 1
"""


@pytest.mark.parametrize("layer, message", [
    ("wide", "error: layer '2-wide' (Wide) declares output_shape (4,) but its forward returned records of shape "
             "(5,) (batch (8, 5))"),
    ("undeclared", "error: layer '2-undeclared' (Undeclared): forward uses parameter 'shift', which its "
                   "parameter_shapes does not declare (declared: scale)"),
])
def test_a_layer_that_breaks_its_declarations_is_one_line_and_status_2(fake_site, tmp_path, capsys, monkeypatch, layer,
                                                                      message):
    monkeypatch.chdir(tmp_path)  # where the run's directory goes
    fake_site.add("contract-layers", entry_points={"contract": "contract_layers"}, modules={"contract_layers": LAYERS})
    (tmp_path / "run.toml").write_text(RUN_FILE.format(layer=layer))
    assert main(["train", str(tmp_path / "run.toml"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == message and "Traceback" not in err


def test_the_output_shape_is_checked_once_per_layer_not_every_step(monkeypatch):
    from sigma_core import Dense, Input, Network, create_handler
    from sigma_core.model import network as network_module

    checked = []
    monkeypatch.setattr(network_module, "check_output_shape", lambda layer, out: checked.append(layer.name))
    network = Network(Input(3) + Dense(2))
    network.initialise(create_handler("numpy"))
    for _ in range(3):
        network.predict([[1.0, 2.0, 3.0]])
    assert checked == ["1-input", "2-dense"]

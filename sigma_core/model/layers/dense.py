"""Dense (fully connected) and Elementwise layers."""

import math

from sigma_core.errors import ArchitectureError
from sigma_core.model.layers.activations import BuiltinActivation, resolve_activation
from sigma_core.model.layers.base import Layer


def default_weight_initialisers():
    """Xavier ``weights`` and zero ``biases``: what dense layers (and plugin layers like them) start from."""
    from sigma_core.model.initialisers import Constant, Xavier

    return {"weights": Xavier(), "biases": Constant(0.0)}


class Dense(Layer):
    """activation(x · weights + biases), ``weights`` (in_features, size) and ``biases`` (size,), over each
    record's flattened features; with ``time_distributed`` a (time, features) record keeps its time axis and
    every step shares the weights."""

    def __init__(self, name, input_shapes, *, size, activation="none", bias=True, time_distributed=False):
        super().__init__(name, input_shapes)
        self.size = int(size)
        self.activation = resolve_activation(activation, name)
        self.keep_time = bool(time_distributed)
        if self.keep_time and len(self.input_shape) != 2:
            raise ArchitectureError(f"layer {name!r}: time_distributed needs (batch, time, features) input, "
                                    f"got per-sample shape {self.input_shape}")
        in_features = self.input_shape[-1] if self.keep_time else math.prod(self.input_shape)
        self.output_shape = (self.input_shape[0], self.size) if self.keep_time else (self.size,)
        self.parameter_shapes = {"weights": (in_features, self.size)}
        if bias:
            self.parameter_shapes["biases"] = (self.size,)

    def default_initialisers(self):
        return default_weight_initialisers()

    def forward(self, handler, inputs, params, context):
        x = inputs[0]
        batch = x.shape[0]
        if x.ndim != 2:
            x = handler.reshape(x, (-1, self.parameter_shapes["weights"][0]))
        activation = self.activation
        fused = isinstance(activation, BuiltinActivation)
        y = handler.dense(x, params["weights"], params.get("biases"), activation.kernel_name if fused else "none")
        if not fused:
            y = activation(handler, y)
        if self.keep_time:
            y = handler.reshape(y, (batch,) + self.output_shape)
        return y


class Elementwise(Layer):
    """activation(x * weights + biases): one weight per feature and one scalar bias
    (Sigma's Elementwise layer never applied its activation; this one does)."""

    def __init__(self, name, input_shapes, *, activation="tanh"):
        super().__init__(name, input_shapes)
        self.activation = resolve_activation(activation, name)
        self.parameter_shapes = {"weights": self.input_shape, "biases": ()}

    def default_initialisers(self):
        from sigma_core.model.initialisers import Constant

        return {"weights": Constant(1.0), "biases": Constant(0.0)}

    def forward(self, handler, inputs, params, context):
        return self.activation(handler, inputs[0] * params["weights"] + params["biases"])

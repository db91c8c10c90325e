"""Recurrent layers over (batch, time, features) tensors.

Both precompute the input projection for every time step in one matrix
product, then loop over time feeding the hidden state back. Sigma's Recurrent
layer had no recurrence (a time-distributed dense layer); these do.
"""

from __future__ import annotations

from ..errors import ArchitectureError
from .activations import resolve_activation
from .base import Layer
from .dense import default_weight_initialisers


def _check_sequence(layer):
    if len(layer.input_shape) != 2:
        raise ArchitectureError(
            f"layer {layer.name!r}: expects (batch, time, features) input, got per-sample shape {layer.input_shape}"
        )


class Recurrent(Layer):
    """Elman RNN: h_t = activation(x_t · weights + h_{t-1} · recurrent_weights + biases).

    Outputs every hidden state, (batch, time, size), or only the last one,
    (batch, size), with ``sequences = false``. The initial state is zero.
    """

    def __init__(self, name, input_shapes, *, size, activation="tanh", sequences=True):
        super().__init__(name, input_shapes)
        _check_sequence(self)
        self.size = int(size)
        self.activation = resolve_activation(activation, name)
        self.sequences = bool(sequences)
        steps, features = self.input_shape
        self.output_shape = (steps, self.size) if self.sequences else (self.size,)
        self.parameter_shapes = {
            "weights": (features, self.size),
            "recurrent_weights": (self.size, self.size),
            "biases": (self.size,),
        }

    def default_initialisers(self):
        from ..initialisers import Xavier

        return {**default_weight_initialisers(), "recurrent_weights": Xavier()}

    def forward(self, h, inputs, params, context):
        x = inputs[0]
        batch, steps, features = x.shape
        projected = h.reshape(h.dense(h.reshape(x, (-1, features)), params["weights"], params["biases"]), (batch, steps, self.size))
        state = None
        states = []
        for t in range(steps):
            z = projected[:, t, :]
            if state is not None:
                z = z + state @ params["recurrent_weights"]
            state = self.activation(h, z)
            states.append(state)
        return h.stack(states, axis=1) if self.sequences else state


class LSTM(Layer):
    """Long short-term memory (Hochreiter & Schmidhuber), gates in i, f, g, o order.

    ``weights`` (features, 4·size), ``recurrent_weights`` (size, 4·size) and
    ``biases`` (4·size,); the forget-gate biases start at 1 so early training
    remembers. Outputs hidden states like :class:`Recurrent`.
    """

    def __init__(self, name, input_shapes, *, size, sequences=True):
        super().__init__(name, input_shapes)
        _check_sequence(self)
        self.size = int(size)
        self.sequences = bool(sequences)
        steps, features = self.input_shape
        self.output_shape = (steps, self.size) if self.sequences else (self.size,)
        self.parameter_shapes = {
            "weights": (features, 4 * self.size),
            "recurrent_weights": (self.size, 4 * self.size),
            "biases": (4 * self.size,),
        }

    def default_initialisers(self):
        from ..initialisers import Custom, Xavier

        size = self.size

        def forget_bias_one(shape, rng):
            import numpy

            biases = numpy.zeros(shape)
            biases[size : 2 * size] = 1.0
            return biases

        return {"weights": Xavier(), "recurrent_weights": Xavier(), "biases": Custom(forget_bias_one)}

    def forward(self, h, inputs, params, context):
        x = inputs[0]
        batch, steps, features = x.shape
        n = self.size
        projected = h.reshape(
            h.dense(h.reshape(x, (-1, features)), params["weights"], params["biases"]), (batch, steps, 4 * n)
        )
        state = cell = None
        states = []
        for t in range(steps):
            z = projected[:, t, :]
            if state is not None:
                z = z + state @ params["recurrent_weights"]
            i = h.sigmoid(z[:, :n])
            f = h.sigmoid(z[:, n : 2 * n])
            g = h.tanh(z[:, 2 * n : 3 * n])
            o = h.sigmoid(z[:, 3 * n :])
            cell = i * g if cell is None else f * cell + i * g
            state = o * h.tanh(cell)
            states.append(state)
        return h.stack(states, axis=1) if self.sequences else state

"""Recurrent layers over (batch, time, features) tensors.

Both precompute the input projection for every time step in one matrix
product, then loop over time feeding the hidden state back
(:meth:`RecurrentBase.forward`); a subclass says what one step computes.
Sigma's Recurrent layer had no recurrence (a time-distributed dense layer);
these do.
"""

from __future__ import annotations

from ..errors import ArchitectureError
from .activations import resolve_activation
from .base import Layer
from .dense import default_weight_initialisers


class RecurrentBase(Layer):
    """The time loop shared by :class:`Recurrent` and :class:`LSTM`; ``gates`` projections per unit."""

    gates = 1

    def __init__(self, name, input_shapes, *, size, sequences=True):
        super().__init__(name, input_shapes)
        if len(self.input_shape) != 2:
            raise ArchitectureError(
                f"layer {name!r}: expects (batch, time, features) input, got per-sample shape {self.input_shape}"
            )
        self.size = int(size)
        self.sequences = bool(sequences)
        steps, features = self.input_shape
        width = self.gates * self.size
        self.output_shape = (steps, self.size) if self.sequences else (self.size,)
        self.parameter_shapes = {"weights": (features, width), "recurrent_weights": (self.size, width), "biases": (width,)}

    def forward(self, handler, inputs, params, context):
        x = inputs[0]
        batch, steps, features = x.shape
        flat = handler.dense(handler.reshape(x, (-1, features)), params["weights"], params["biases"])
        projected = handler.reshape(flat, (batch, steps, self.gates * self.size))
        state = cell = None
        states = []
        for t in range(steps):
            z = projected[:, t, :]
            if state is not None:
                z = z + state @ params["recurrent_weights"]
            state, cell = self.step(handler, z, cell)
            states.append(state)
        return handler.stack(states, axis=1) if self.sequences else state

    def step(self, handler, z, cell):
        """(hidden state, cell state) after one time step from the pre-activations ``z``."""
        raise NotImplementedError


class Recurrent(RecurrentBase):
    """Elman RNN: h_t = activation(x_t · weights + h_{t-1} · recurrent_weights + biases).

    Outputs every hidden state, (batch, time, size), or only the last one,
    (batch, size), with ``sequences = false``. The initial state is zero.
    """

    def __init__(self, name, input_shapes, *, size, activation="tanh", sequences=True):
        super().__init__(name, input_shapes, size=size, sequences=sequences)
        self.activation = resolve_activation(activation, name)

    def default_initialisers(self):
        from ..initialisers import Xavier

        return {**default_weight_initialisers(), "recurrent_weights": Xavier()}

    def step(self, handler, z, cell):
        return self.activation(handler, z), None


class LSTM(RecurrentBase):
    """Long short-term memory (Hochreiter & Schmidhuber), gates in i, f, g, o order.

    ``weights`` (features, 4·size), ``recurrent_weights`` (size, 4·size) and
    ``biases`` (4·size,); the forget-gate biases start at 1 so early training
    remembers. Outputs hidden states like :class:`Recurrent`.
    """

    gates = 4

    def default_initialisers(self):
        from ..initialisers import Custom, Xavier

        size = self.size

        def forget_bias_one(shape, rng):
            import numpy

            biases = numpy.zeros(shape)
            biases[size : 2 * size] = 1.0
            return biases

        return {"weights": Xavier(), "recurrent_weights": Xavier(), "biases": Custom(forget_bias_one)}

    def step(self, handler, z, cell):
        n = self.size
        i = handler.sigmoid(z[:, :n])
        f = handler.sigmoid(z[:, n : 2 * n])
        g = handler.tanh(z[:, 2 * n : 3 * n])
        o = handler.sigmoid(z[:, 3 * n :])
        cell = i * g if cell is None else f * cell + i * g
        return o * handler.tanh(cell), cell

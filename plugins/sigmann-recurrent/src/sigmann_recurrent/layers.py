"""Recurrent layers over (batch, time, features) tensors: ``recurrent`` (alias ``rnn``) and ``lstm``.

Each runs one sequence op (:mod:`sigmann_recurrent.ops`, through
``handler.op``: one tape record and a hand-written BPTT per sequence). Sigma's
Recurrent layer had no recurrence (a time-distributed dense layer); these do.
"""

from __future__ import annotations

from sigma_core import ArchitectureError, Custom, Layer, Xavier, default_weight_initialisers, resolve_activation


class RecurrentBase(Layer):
    """What :class:`Recurrent` and :class:`LSTM` share: shapes and parameters; ``gates`` projections per unit."""

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
        return self.sequence(handler, inputs[0], params["weights"], params["recurrent_weights"], params["biases"])


class Recurrent(RecurrentBase):
    """Elman RNN: h_t = activation(x_t · weights + h_{t-1} · recurrent_weights + biases).

    Outputs every hidden state, (batch, time, size), or only the last one,
    (batch, size), with ``sequences = false``. The initial state is zero.
    """

    def __init__(self, name, input_shapes, *, size, activation="tanh", sequences=True):
        super().__init__(name, input_shapes, size=size, sequences=sequences)
        self.activation = resolve_activation(activation, name)

    def default_initialisers(self):
        return {**default_weight_initialisers(), "recurrent_weights": Xavier()}

    def sequence(self, handler, x, weights, recurrent_weights, biases):
        name = getattr(self.activation, "kernel_name", None)
        if name is not None:
            return handler.op("rnn_sequence", x, weights, recurrent_weights, biases, activation=name,
                              sequences=self.sequences)
        # A plugin activation: a step-by-step loop of handler ops, differentiated by the tape.
        projected = handler.reshape(handler.dense(handler.reshape(x, (-1, x.shape[2])), weights, biases), x.shape[:2] + (-1,))
        state, states = None, []
        for t in range(x.shape[1]):
            z = projected[:, t, :] if state is None else projected[:, t, :] + state @ recurrent_weights
            state = self.activation(handler, z)
            states.append(state)
        return handler.stack(states, axis=1) if self.sequences else state


class LSTM(RecurrentBase):
    """Long short-term memory (Hochreiter & Schmidhuber), gates in i, f, g, o order.

    ``weights`` (features, 4·size), ``recurrent_weights`` (size, 4·size) and
    ``biases`` (4·size,); the forget-gate biases start at 1 so early training
    remembers. Outputs hidden states like :class:`Recurrent`.
    """

    gates = 4

    def default_initialisers(self):
        size = self.size

        def forget_bias_one(shape, rng):
            import numpy

            biases = numpy.zeros(shape)
            biases[size : 2 * size] = 1.0
            return biases

        return {"weights": Xavier(), "recurrent_weights": Xavier(), "biases": Custom(forget_bias_one)}

    def sequence(self, handler, x, weights, recurrent_weights, biases):
        return handler.op("lstm_sequence", x, weights, recurrent_weights, biases, sequences=self.sequences)

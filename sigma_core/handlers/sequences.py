"""Sequence-level recurrent ops (Elman RNN, LSTM): one tape record per sequence, with its own BPTT.

Recording the ~15 ops of every time step made a character LSTM 11× slower
than PyTorch, and each step slice's gradient was scattered into a full-size
zero array (quadratic in the sequence length). Here the forward pass projects
the inputs of every step in one GEMM and runs one recurrent GEMM per step into
a preallocated buffer; the backward pass walks the sequence once, writing the
pre-activation gradients over the saved gates, then takes the weight gradients
with one GEMM each over all steps.

Every buffer is batch-major, (B, T, ·), as the layer's input and output are:
the hidden states are the op's output itself, not a copy, and the inputs need
no time-major copy, which keeps a step's peak memory near what BPTT must keep.
A step's slice ``[:, t]`` is strided, which BLAS and NumPy take as they are;
compiled cells index ``[r, t]``, a contiguous row.

:class:`RecurrentKernels` is written over the array kernels (``kernels.recurrent``),
so every handler gets it; a backend overrides the per-step cells
(``lstm_cell``, ``lstm_cell_backward``) with fused loops. Layout (what
checkpoints hold): weights (features, gates·size), recurrent_weights
(size, gates·size), biases (gates·size,), LSTM gates in i, f, g, o order; the
state starts at zero.
"""

from __future__ import annotations

from ..errors import ShapeError


class RecurrentKernels:
    """Forward and BPTT loops of the sequence ops over raw arrays; see the module docstring."""

    def __init__(self, kernels):
        self.k, self.xp = kernels, kernels.xp
        # Per gate (i, f, g, o): sigmoid(x) = tanh(x/2)/2 + 1/2, as the sigmoid kernel computes it; g is tanh.
        self._half = kernels.xp.asarray([[0.5], [0.5], [1.0], [0.5]], dtype=kernels.dtype)
        self._offset = kernels.xp.asarray([[0.5], [0.5], [0.0], [0.5]], dtype=kernels.dtype)

    def _project(self, x, weights, biases=None):
        """x·weights (+ biases) for every step, (B, T, width)."""
        batch, steps, features = x.shape
        z = self.k.empty((batch, steps, weights.shape[1]))
        self.xp.matmul(x.reshape(-1, features), weights, out=z.reshape(-1, weights.shape[1]))
        if biases is not None:
            self.xp.add(z, biases, out=z)
        return z

    def output(self, hs, sequences):
        """The op's output: the states themselves (B, T, H), or a copy of the last one (B, H)."""
        if sequences:
            return hs
        out = self.k.empty((hs.shape[0], hs.shape[2]))
        out[...] = hs[:, -1]
        return out

    def rnn_forward(self, x, weights, recurrent, biases, activation):
        """Saved (hs,): hs[:, t] = activation(x_t·W + h_{t-1}·U + b)."""
        hs = self._project(x, weights, biases)
        tmp = self.k.empty((hs.shape[0], hs.shape[2]))
        for t in range(hs.shape[1]):
            if t:
                self.xp.matmul(hs[:, t - 1], recurrent, out=tmp)
                self.xp.add(hs[:, t], tmp, out=hs[:, t])
            self.k.activate(activation, hs[:, t], hs[:, t])
        return (hs,)

    def rnn_backward(self, g, inputs, saved, activation, sequences, needs):
        xp, (hs,) = self.xp, saved
        dz = self.k.activation_backward(activation, self.k.full(hs.shape, 1.0), hs)  # f' of every step, then dz
        dh = self.k.full((hs.shape[0], hs.shape[2]), 0.0)  # the gradient of h_t
        for t in reversed(range(hs.shape[1])):
            if sequences or t == hs.shape[1] - 1:
                xp.add(dh, g[:, t] if sequences else g, out=dh)
            xp.multiply(dz[:, t], dh, out=dz[:, t])
            if t:
                xp.matmul(dz[:, t], inputs[2].T, out=dh)
        return self._weight_gradients(dz, hs, inputs, needs)

    def lstm_forward(self, x, weights, recurrent, biases):
        """Saved (gates, cells, hs): gate activations, cells[t + 1] = c_t (cells[0] = 0, time-major), hs[:, t] = h_t.

        The biases are added in the cell, which reads the step's gates anyway, not in a pass of their own."""
        gates = self._project(x, weights)
        batch, steps, width = gates.shape
        cells = self.k.empty((steps + 1, batch, width // 4))
        cells[0] = 0
        hs = self.k.empty((batch, steps, width // 4))
        z = self.k.full((batch, width), 0.0)
        for t in range(steps):
            if t:
                self.xp.matmul(hs[:, t - 1], recurrent, out=z)
            self.lstm_cell(gates, t, z, biases, cells[t], cells[t + 1], hs)
        return gates, cells, hs

    def lstm_cell(self, gates, t, z, b, c_prev, c, hs):
        """Step ``t``: ``gates[:, t]`` (x·W) becomes the gate activations of itself + z + b; writes c_t, hs[:, t]."""
        xp, a, h, n = self.xp, gates[:, t], hs[:, t], hs.shape[2]
        by_gate = a.reshape(a.shape[0], 4, n)  # a view: one call scales all four gates
        xp.add(a, z, out=a)
        xp.add(a, b, out=a)
        xp.multiply(by_gate, self._half, out=by_gate)
        xp.tanh(a, out=a)
        xp.multiply(by_gate, self._half, out=by_gate)
        xp.add(by_gate, self._offset, out=by_gate)
        i, f, g, o = a[:, :n], a[:, n : 2 * n], a[:, 2 * n : 3 * n], a[:, 3 * n :]
        xp.multiply(f, c_prev, out=c)
        xp.multiply(i, g, out=h)
        xp.add(c, h, out=c)
        xp.tanh(c, out=h)
        xp.multiply(o, h, out=h)

    def lstm_cell_backward(self, gates, t, c_prev, c, dh, dc, scratch):
        """Step ``t`` back: ``gates[:, t]`` become their pre-activation gradients; ``dc`` moves from c_t to c_{t-1}.

        ``dh`` is the whole gradient of h_t and is overwritten, like ``scratch`` (B, 4H).
        """
        xp, a, n = self.xp, gates[:, t], dh.shape[1]
        i, f, g, o = a[:, :n], a[:, n : 2 * n], a[:, 2 * n : 3 * n], a[:, 3 * n :]
        s_i, s_f, s_g, s_o = scratch[:, :n], scratch[:, n : 2 * n], scratch[:, 2 * n : 3 * n], scratch[:, 3 * n :]
        xp.tanh(c, out=s_i)
        xp.multiply(s_i, s_i, out=s_f)  # dc += dh·o·(1 − tanh²c)
        xp.subtract(1, s_f, out=s_f)
        xp.multiply(s_f, o, out=s_f)
        xp.multiply(s_f, dh, out=s_f)
        xp.add(dc, s_f, out=dc)
        xp.multiply(dh, s_i, out=dh)  # the gradient of o
        xp.subtract(1, a, out=scratch)  # each gate's derivative from its output: s(1 − s), 1 − g²
        xp.multiply(scratch, a, out=scratch)
        xp.multiply(g, g, out=s_g)
        xp.subtract(1, s_g, out=s_g)
        xp.multiply(s_o, dh, out=o)
        xp.multiply(s_i, g, out=s_i)  # (dc·g)·i'
        xp.multiply(s_g, i, out=s_g)  # (dc·i)·g'
        xp.multiply(s_i, dc, out=i)
        xp.multiply(s_g, dc, out=g)
        xp.multiply(s_f, c_prev, out=s_f)  # (dc·c_{t-1})·f'
        xp.multiply(dc, f, out=dh)  # the gradient of c_{t-1}
        xp.multiply(s_f, dc, out=f)
        xp.copyto(dc, dh)

    def lstm_backward(self, g, inputs, saved, activation, sequences, needs):
        xp, (gates, cells, hs) = self.xp, saved
        batch, steps, width = gates.shape
        dh = self.k.empty((batch, width // 4))
        recurrent_dh = self.k.full((batch, width // 4), 0.0)
        dc = self.k.full((batch, width // 4), 0.0)
        scratch = self.k.empty((batch, width))
        for t in reversed(range(steps)):
            if sequences or t == steps - 1:
                xp.add(recurrent_dh, g[:, t] if sequences else g, out=dh)
            else:
                xp.copyto(dh, recurrent_dh)
            self.lstm_cell_backward(gates, t, cells[t], cells[t + 1], dh, dc, scratch)
            if t:
                xp.matmul(gates[:, t], inputs[2].T, out=recurrent_dh)
        return self._weight_gradients(gates, hs, inputs, needs)

    def _weight_gradients(self, dz, hs, inputs, needs):
        """(dx, dW, dU, db) from the pre-activation gradients of every step, one GEMM each.

        dU pairs h_{t-1} with dz_t: consecutive rows of the flattened (B·T, ·) arrays, except where a
        batch row's first step meets the previous row's last state; those B − 1 products come off again.
        """
        k, (x, weights) = self.k, inputs[:2]
        flat = dz.reshape(-1, dz.shape[2])
        dx = k.matmul(flat, weights.T).reshape(x.shape) if needs[0] else None
        dw = k.matmul(x.reshape(-1, x.shape[2]).T, flat) if needs[1] else None
        du = None
        if needs[2]:
            du = k.matmul(hs.reshape(-1, hs.shape[2])[:-1].T, flat[1:])
            self.xp.subtract(du, k.matmul(hs[:-1, -1].T, dz[1:, 0]), out=du)
        db = k.sum(flat, axis=0) if needs[3] else None
        return dx, dw, du, db


def _vjp(kind):
    def vjp(k, g, inputs, out, saved, needs):
        return getattr(k.recurrent, f"{kind}_backward")(g, inputs, *saved, needs)

    vjp.__name__ = f"{kind}_sequence"
    return vjp


_VJPS = {"rnn": _vjp("rnn"), "lstm": _vjp("lstm")}


class RecurrentOps:
    """The handler's sequence ops (a :class:`~sigma_core.handler.Handler` base class)."""

    def rnn_sequence(self, x, weights, recurrent_weights, biases, activation="tanh", sequences=True):
        """Elman RNN over x (batch, time, features): h_t = activation(x_t·W + h_{t-1}·U + b).

        Every state (batch, time, size), or the last one (batch, size) with
        ``sequences=False``; ``activation`` is a built-in name.
        """
        inputs = (x, weights, recurrent_weights, biases)
        raws = self._sequence_raws("rnn_sequence", inputs, 1)
        saved = self.kernels.recurrent.rnn_forward(*raws, activation)
        out = self._wrap(self.kernels.recurrent.output(saved[-1], sequences))
        self._record(inputs, raws, out, _VJPS["rnn"], (saved, activation, sequences))
        return out

    def lstm_sequence(self, x, weights, recurrent_weights, biases, sequences=True):
        """LSTM over x (batch, time, features), gates i, f, g, o; outputs like :meth:`rnn_sequence`."""
        inputs = (x, weights, recurrent_weights, biases)
        raws = self._sequence_raws("lstm_sequence", inputs, 4)
        saved = self.kernels.recurrent.lstm_forward(*raws)
        out = self._wrap(self.kernels.recurrent.output(saved[-1], sequences))
        self._record(inputs, raws, out, _VJPS["lstm"], (saved, None, sequences))
        return out

    def _sequence_raws(self, op, inputs, gates):
        raws = tuple([self._raw(a) for a in inputs])
        x, w, u, b = raws
        size = u.shape[0] if u.ndim == 2 else 0
        if x.ndim != 3 or w.shape != (x.shape[2], gates * size) or u.shape != (size, gates * size) or b.shape != (gates * size,):
            shapes = ", ".join(str(a.shape) for a in raws)
            raise ShapeError(f"{op}: shapes x, weights, recurrent_weights, biases {shapes} do not fit {gates} gate(s)")
        return raws

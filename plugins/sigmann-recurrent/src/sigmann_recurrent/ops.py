"""The sequence ops ``rnn_sequence`` and ``lstm_sequence``: one tape record per sequence, with its own BPTT.

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

Both are :class:`sigma_core.Op` rules over the handler's kernels ``k``, so they
run on every handler; a handler's kernel overrides the per-step LSTM cells
(:meth:`LSTMSequence.cell`, :meth:`LSTMSequence.cell_backward`) with fused loops
(:mod:`sigmann_recurrent.cpu`). Inputs: x (batch, time, features), weights
(features, gates·size), recurrent weights (size, gates·size), biases
(gates·size,), LSTM gates in i, f, g, o order (the layout checkpoints hold);
the state starts at zero. Output: every state (batch, time, size), or the last
one (batch, size) with ``sequences=False``.
"""

from __future__ import annotations

from sigma_core import ACTIVATIONS, Op, ShapeError


class SequenceOp(Op):
    """What both sequence ops share: the shape check, the input projection, the output and the weight gradients."""

    name = ""
    gates = 1

    def check(self, inputs, params):
        if len(inputs) != 4:
            raise ShapeError(f"{self.name}: takes x, weights, recurrent_weights, biases; got {len(inputs)} inputs")
        x, w, u, b = shapes = [getattr(a, "shape", ()) for a in inputs]  # a Python number has shape ()
        size = u[0] if len(u) == 2 else 0
        width = self.gates * size
        if len(x) != 3 or w != (x[2], width) or u != (size, width) or b != (width,):
            raise ShapeError(f"{self.name}: shapes x, weights, recurrent_weights, biases "
                             f"{', '.join(map(str, shapes))} do not fit {self.gates} gate(s)")

    @staticmethod
    def product(k, a, b, out):
        """out = a·b (2-D; ``a`` may be a step's strided slice): NumPy's BLAS here; a handler's kernel of the op
        takes it from the handler's own GEMM provider (:mod:`sigmann_recurrent.cpu`)."""
        k.xp.matmul(a, b, out=out)

    def project(self, k, x, weights, biases=None):
        """x·weights (+ biases) for every step, (B, T, width): one GEMM over all steps, which the recurrence does
        not wait for."""
        batch, steps, features = x.shape
        z = k.empty((batch, steps, weights.shape[1]))
        self.product(k, x.reshape(-1, features), weights, z.reshape(-1, weights.shape[1]))
        if biases is not None:
            k.xp.add(z, biases, out=z)
        return z

    @staticmethod
    def output(k, hs, sequences):
        """The op's output: the states themselves (B, T, H), or a copy of the last one (B, H)."""
        if sequences:
            return hs
        out = k.empty((hs.shape[0], hs.shape[2]))
        out[...] = hs[:, -1]
        return out

    @staticmethod
    def weight_gradients(k, dz, hs, inputs, needs):
        """(dx, dW, dU, db) from the pre-activation gradients of every step, one GEMM each.

        dU pairs h_{t-1} with dz_t: consecutive rows of the flattened (B·T, ·) arrays, except where a
        batch row's first step meets the previous row's last state; those B − 1 products come off again.
        """
        x, weights = inputs[:2]
        flat = dz.reshape(-1, dz.shape[2])
        dx = k.matmul(flat, weights.T).reshape(x.shape) if needs[0] else None
        dw = k.matmul(x.reshape(-1, x.shape[2]).T, flat) if needs[1] else None
        du = None
        if needs[2]:
            du = k.matmul(hs.reshape(-1, hs.shape[2])[:-1].T, flat[1:])
            k.xp.subtract(du, k.matmul(hs[:-1, -1].T, dz[1:, 0]), out=du)
        db = k.sum(flat, axis=0) if needs[3] else None
        return dx, dw, du, db

    def examples(self):
        """x (batch 2, time T, features 2), size 3; the cases of :meth:`cases`, at T = 1 and T = 3."""
        width = self.gates * 3

        def make(steps):
            return lambda rng: [rng.standard_normal(s) for s in ((2, steps, 2), (2, width), (3, width), (width,))]

        return [(f"{label}-T{steps}", make(steps), params)
                for steps in (1, 3) for label, params in self.cases()]

    def cases(self) -> list[tuple[str, dict]]:
        return [("all", {"sequences": True}), ("last", {"sequences": False})]


class RNNSequence(SequenceOp):
    """Elman RNN over x: h_t = activation(x_t·W + h_{t-1}·U + b), ``activation`` a built-in name."""

    name = "rnn_sequence"

    def check(self, inputs, params):
        super().check(inputs, params)
        activation = params.get("activation", "tanh")
        if activation not in ACTIVATIONS:
            raise ShapeError(f"{self.name}: {activation!r} is not a built-in activation ({', '.join(ACTIVATIONS)})")

    def forward(self, k, x, weights, recurrent, biases, activation="tanh", sequences=True):
        """Saved: hs, where hs[:, t] = activation(x_t·W + h_{t-1}·U + b)."""
        hs = self.project(k, x, weights, biases)
        tmp = k.empty((hs.shape[0], hs.shape[2]))
        for t in range(hs.shape[1]):
            if t:
                self.product(k, hs[:, t - 1], recurrent, tmp)
                k.xp.add(hs[:, t], tmp, out=hs[:, t])
            k.activate(activation, hs[:, t], hs[:, t])
        return self.output(k, hs, sequences), hs

    def backward(self, k, g, inputs, out, hs, needs, activation="tanh", sequences=True):
        xp = k.xp
        dz = k.activation_backward(activation, k.full(hs.shape, 1.0), hs)  # f' of every step, then dz
        dh = k.full((hs.shape[0], hs.shape[2]), 0.0)  # the gradient of h_t
        for t in reversed(range(hs.shape[1])):
            if sequences or t == hs.shape[1] - 1:
                xp.add(dh, g[:, t] if sequences else g, out=dh)
            xp.multiply(dz[:, t], dh, out=dz[:, t])
            if t:
                self.product(k, dz[:, t], inputs[2].T, dh)
        return self.weight_gradients(k, dz, hs, inputs, needs)

    def cases(self):
        outputs = super().cases()
        return [(f"{a}-{label}", {"activation": a, **params})
                for a in ("tanh", "sigmoid", "softplus", "none") for label, params in outputs]


class LSTMSequence(SequenceOp):
    """LSTM over x, gates i, f, g, o; see the module docstring."""

    name = "lstm_sequence"
    gates = 4

    def __init__(self):
        self.scales = None  # per gate (i, f, g, o): sigmoid(x) = tanh(x/2)/2 + 1/2, as k.sigmoid computes it

    def forward(self, k, x, weights, recurrent, biases, sequences=True):
        """Saved (gates, cells, hs): gate activations, cells[t + 1] = c_t (cells[0] = 0, time-major), hs[:, t] = h_t.

        The biases are added in the cell, which reads the step's gates anyway, not in a pass of their own."""
        if self.scales is None:  # this instance serves one handler: its dtype and array module
            self.scales = (k.xp.asarray([[0.5], [0.5], [1.0], [0.5]], dtype=k.dtype),
                           k.xp.asarray([[0.5], [0.5], [0.0], [0.5]], dtype=k.dtype))
        gates = self.project(k, x, weights)
        batch, steps, width = gates.shape
        cells = k.empty((steps + 1, batch, width // 4))
        cells[0] = 0
        hs = k.empty((batch, steps, width // 4))
        z = k.full((batch, width), 0.0)
        for t in range(steps):
            if t:
                self.product(k, hs[:, t - 1], recurrent, z)
            self.cell(k, gates, t, z, biases, cells[t], cells[t + 1], hs)
        return self.output(k, hs, sequences), (gates, cells, hs)

    def cell(self, k, gates, t, z, b, c_prev, c, hs):
        """Step ``t``: ``gates[:, t]`` (x·W) becomes the gate activations of itself + z + b; writes c_t, hs[:, t]."""
        xp, a, h, n = k.xp, gates[:, t], hs[:, t], hs.shape[2]
        half, offset = self.scales
        by_gate = a.reshape(a.shape[0], 4, n)  # a view: one call scales all four gates
        xp.add(a, z, out=a)
        xp.add(a, b, out=a)
        xp.multiply(by_gate, half, out=by_gate)
        xp.tanh(a, out=a)
        xp.multiply(by_gate, half, out=by_gate)
        xp.add(by_gate, offset, out=by_gate)
        i, f, g, o = a[:, :n], a[:, n : 2 * n], a[:, 2 * n : 3 * n], a[:, 3 * n :]
        xp.multiply(f, c_prev, out=c)
        xp.multiply(i, g, out=h)
        xp.add(c, h, out=c)
        xp.tanh(c, out=h)
        xp.multiply(o, h, out=h)

    def cell_backward(self, k, gates, t, c_prev, c, dh, dc, scratch):
        """Step ``t`` back: ``gates[:, t]`` become their pre-activation gradients; ``dc`` moves from c_t to c_{t-1}.

        ``dh`` is the whole gradient of h_t and is overwritten, like ``scratch`` (B, 4H).
        """
        xp, a, n = k.xp, gates[:, t], dh.shape[1]
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

    def backward(self, k, g, inputs, out, saved, needs, sequences=True):
        xp, (gates, cells, hs) = k.xp, saved
        batch, steps, width = gates.shape
        dh = k.empty((batch, width // 4))
        recurrent_dh = k.full((batch, width // 4), 0.0)
        dc = k.full((batch, width // 4), 0.0)
        scratch = k.empty((batch, width))
        for t in reversed(range(steps)):
            if sequences or t == steps - 1:
                xp.add(recurrent_dh, g[:, t] if sequences else g, out=dh)
            else:
                xp.copyto(dh, recurrent_dh)
            self.cell_backward(k, gates, t, cells[t], cells[t + 1], dh, dc, scratch)
            if t:
                self.product(k, gates[:, t], inputs[2].T, recurrent_dh)
        return self.weight_gradients(k, gates, hs, inputs, needs)

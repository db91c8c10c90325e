"""The batch-major sequence ops at the shapes where their dU correction matters: one step, one batch row.

dU pairs h_{t-1} with dz_t over the flattened (batch·time) rows and takes off
the pairs that cross from one batch row to the next; with T = 1 every pair
crosses, with B = 1 none does. Checked against central finite differences of a
plain NumPy loop in float64, on the NumPy and the numba handler.
"""

from __future__ import annotations

import importlib.util

import numpy
import pytest

from sigma_core import create_handler

CPU = pytest.param("cpu", marks=pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="needs numba"))

#: Central differences with the step ∛eps, which balances truncation (step²) against round-off (eps/step), are
#: good to about eps^(2/3) of the values (~1e-10 here); √eps leaves room for that and catches a wrong VJP (off by O(1)).
EPS = float(numpy.finfo("float64").eps)
STEP, FD_TOLERANCE = EPS ** (1 / 3), EPS ** 0.5


def plain(x, w, u, b, kind, sequences):
    """A plain NumPy LSTM (gates i, f, g, o) or tanh RNN."""
    n = u.shape[0]
    sigmoid = lambda v: 1 / (1 + numpy.exp(-v))  # noqa: E731
    h, c, out = numpy.zeros((x.shape[0], n)), numpy.zeros((x.shape[0], n)), []
    for t in range(x.shape[1]):
        z = x[:, t] @ w + h @ u + b
        if kind == "rnn":
            h = numpy.tanh(z)
        else:
            c = sigmoid(z[:, n : 2 * n]) * c + sigmoid(z[:, :n]) * numpy.tanh(z[:, 2 * n : 3 * n])
            h = sigmoid(z[:, 3 * n :]) * numpy.tanh(c)
        out.append(h)
    return numpy.stack(out, axis=1) if sequences else h


@pytest.mark.parametrize("handler_name", ["numpy", CPU])
@pytest.mark.parametrize("kind", ["lstm", "rnn"])
@pytest.mark.parametrize("batch, steps, sequences", [(1, 3, True), (3, 1, True), (2, 2, False), (3, 4, True)])
def test_gradients_match_finite_differences_at_edge_shapes(handler_name, kind, batch, steps, sequences, assert_close):
    handler = create_handler(handler_name, dtype="float64", seed=0)
    rng = numpy.random.default_rng(batch * 10 + steps)
    gates, features, size = (4 if kind == "lstm" else 1), 2, 3
    values = [rng.standard_normal(s) * 0.8 for s in ((batch, steps, features), (features, gates * size),
                                                     (size, gates * size), (gates * size,))]
    weights = rng.standard_normal((batch, steps, size) if sequences else (batch, size))
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        tape.watch(*arrays)
        out = handler.op(f"{kind}_sequence", *arrays, sequences=sequences)
        grads = [g.to_numpy() for g in tape.gradient(out, arrays, seed=handler.asarray(weights))]
    assert_close(out.to_numpy(), plain(*values, kind, sequences), "float64", steps * (features + gates * size))
    for position, (value, grad) in enumerate(zip(values, grads)):
        numeric = numpy.zeros_like(value)
        for index in numpy.ndindex(value.shape):
            shifted = [v.copy() for v in values]
            shifted[position][index] += STEP
            up = (plain(*shifted, kind, sequences) * weights).sum()
            shifted[position][index] -= 2 * STEP
            down = (plain(*shifted, kind, sequences) * weights).sum()
            numeric[index] = (up - down) / (2 * STEP)
        numpy.testing.assert_allclose(grad, numeric, rtol=FD_TOLERANCE, atol=FD_TOLERANCE, err_msg=f"input {position}")

"""The ``cpu`` handler's kernel of ``lstm_sequence`` (sigmann_recurrent.cpu) against the portable rule, at training sizes.

The ops' examples check them on tiny inputs; here float32 runs at the
character-LSTM's width, where the rational tanh of the fused loops must stay
within float32 rounding of NumPy's, forward and backward, over 20 steps.
"""

import numpy
import pytest

from sigma_core import NumpyHandler
from sigma_core.compute.ops import resolve

pytest.importorskip("numba")
from sigma_cpu.handler import NumbaHandler  # noqa: E402
from sigmann_recurrent.cpu import FusedLSTMSequence  # noqa: E402
from sigmann_recurrent.ops import LSTMSequence, RNNSequence  # noqa: E402


def _lstm(handler, values, sequences):
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        tape.watch(*arrays)
        out = handler.op("lstm_sequence", *arrays, sequences=sequences)
        seed = numpy.random.default_rng(5).standard_normal(out.shape)
        grads = tape.gradient(out, arrays, seed=handler.asarray(seed))
    return [a.to_numpy() for a in (out, *grads)]


def test_the_cpu_handler_runs_the_fused_cell_and_the_numpy_handler_the_rule():
    assert type(resolve("lstm_sequence", "cpu")) is FusedLSTMSequence
    assert type(resolve("lstm_sequence", "numpy")) is LSTMSequence
    assert type(resolve("rnn_sequence", "cpu")) is RNNSequence  # no kernel registered: the portable rule


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sequences", [True, False])
def test_fused_lstm_matches_the_reference(dtype, sequences, assert_close):
    batch, steps, features, size = 16, 20, 65, 64
    rng = numpy.random.default_rng(0)
    x = numpy.eye(features)[rng.integers(0, features, (batch, steps))]
    values = [x, rng.standard_normal((features, 4 * size)) * 0.3, rng.standard_normal((size, 4 * size)) * 0.15,
              rng.standard_normal(4 * size) * 0.5]
    ours, reference = _lstm(NumbaHandler(dtype), values, sequences), _lstm(NumpyHandler(dtype), values, sequences)
    for name, a, b in zip(("output", "dx", "dW", "dU", "db"), ours, reference):
        assert a.dtype == dtype
        assert_close(a, b, dtype, steps * (features + 4 * size), name)  # a step's widest sum: x·W + h·U

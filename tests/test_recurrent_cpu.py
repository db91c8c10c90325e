"""The ``cpu`` handler's fused LSTM cell (sigma_cpu.recurrent) against the NumPy reference, at training sizes.

The conformance kit checks the sequence ops on tiny inputs; here float32 runs
at the character-LSTM's width, where the rational tanh of the fused loops must
stay within float32 rounding of NumPy's, forward and backward, over 20 steps.
"""

import numpy
import pytest

from sigma_core.handlers.numpy_handler import NumpyHandler

pytest.importorskip("numba")
from sigma_cpu.handler import NumbaHandler  # noqa: E402
from sigma_cpu.recurrent import NumbaRecurrent  # noqa: E402


def _lstm(handler, values, sequences):
    with handler.tape() as tape:
        arrays = [handler.asarray(v) for v in values]
        tape.watch(*arrays)
        out = handler.lstm_sequence(*arrays, sequences=sequences)
        seed = numpy.random.default_rng(5).standard_normal(out.shape)
        grads = tape.gradient(out, arrays, seed=handler.asarray(seed))
    return [a.to_numpy() for a in (out, *grads)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sequences", [True, False])
def test_fused_lstm_matches_the_reference(dtype, sequences):
    batch, steps, features, size = 16, 20, 65, 64
    rng = numpy.random.default_rng(0)
    x = numpy.eye(features)[rng.integers(0, features, (batch, steps))]
    values = [x, rng.standard_normal((features, 4 * size)) * 0.3, rng.standard_normal((size, 4 * size)) * 0.15,
              rng.standard_normal(4 * size) * 0.5]
    handler = NumbaHandler(dtype)
    assert isinstance(handler.kernels.recurrent, NumbaRecurrent)
    ours, reference = _lstm(handler, values, sequences), _lstm(NumpyHandler(dtype), values, sequences)
    tolerance = {"float32": dict(rtol=1e-4, atol=2e-5), "float64": dict(rtol=1e-12, atol=1e-13)}[dtype]
    for name, a, b in zip(("output", "dx", "dW", "dU", "db"), ours, reference):
        assert a.dtype == dtype
        numpy.testing.assert_allclose(a, b, **tolerance, err_msg=name)

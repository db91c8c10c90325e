"""The ``cpu`` handler's tiled attention (sigmann_attention.cpu) at sequence lengths of several tiles, against
PyTorch's SDPA, and what it keeps for the backward pass: one number per query, not the (T, T) weights."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import create_handler
from sigma_core.compute.ops import resolve

torch = pytest.importorskip("torch", reason="PyTorch is the reference these tests compare with")
pytest.importorskip("numba")
from sigmann_attention.cpu import BLOCK, FlashAttention  # noqa: E402
from sigmann_attention.cpu_embedding import ScatterEmbedding  # noqa: E402
from sigmann_attention.cpu_gelu import FusedGELU  # noqa: E402
from sigmann_attention.ops import GELU, Attention, Embedding  # noqa: E402
packed_sdpa = pytest.importorskip("torch_gpt").packed_sdpa


def test_the_cpu_handler_runs_the_kernels_and_the_numpy_handler_the_rules():
    assert type(resolve("attention", "cpu")) is FlashAttention
    assert type(resolve("attention", "numpy")) is Attention
    assert type(resolve("gelu", "cpu")) is FusedGELU
    assert type(resolve("gelu", "numpy")) is GELU
    assert type(resolve("embedding", "cpu")) is ScatterEmbedding
    assert type(resolve("embedding", "numpy")) is Embedding


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_exact_gelu_matches_torch_over_its_whole_range(dtype, taped, close, seeded, torch_grads):
    """The float32 loop's rational erf is clamped at ±4 and within 4e-7 of erf: a few ulp of Φ everywhere."""
    x = numpy.linspace(-9, 9, 4001).astype(dtype).reshape(1, -1)
    out, (grad,) = taped(create_handler("cpu", dtype=dtype), "gelu", [x], seeded(dtype), approximate="none")
    expected, (expected_grad,) = torch_grads(lambda t: torch.nn.functional.gelu(t), [x], seeded(dtype)(x.shape), [0])
    close(out, expected, dtype, 8, "output")  # erf's few ulp, then the product's
    close(grad, expected_grad, dtype, 8, "gradient")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("steps, causal, padded", [(2 * BLOCK + 3, True, False), (BLOCK + 1, False, True),
                                                   (3 * BLOCK, True, True)])
def test_several_tiles_match_torch(dtype, steps, causal, padded, taped, close, seeded, torch_grads):
    rng = numpy.random.default_rng(steps)
    qkv = rng.standard_normal((2, steps, 3 * 2 * 8)).astype(dtype)
    mask = numpy.ones((2, steps))
    if padded:
        mask[1, steps // 2 :] = 0  # the second row is half padding, across a tile boundary
    handler = create_handler("cpu", dtype=dtype)
    values, watched = ([qkv, mask], [0]) if padded else ([qkv], [0])
    out, (grad,) = taped(handler, "attention", values, seeded(dtype), watched=watched, heads=2, causal=causal)
    expected, (expected_grad,) = torch_grads(lambda t, *m: packed_sdpa(t, 2, mask if padded else None, causal),
                                             values, seeded(dtype)(out.shape), [0])
    depth = steps * 8 * 4  # a query's scores, weighted sum and their gradients, over every key
    close(out, expected, dtype, depth, "output")
    close(grad, expected_grad, dtype, depth, "gradient of qkv")


@pytest.mark.parametrize("name, steps, saved_shape", [("cpu", 300, (2, 2, 300)), ("numpy", 300, (2, 2, 300, 300)),
                                                      ("cpu", BLOCK, (2, 2, BLOCK, BLOCK))])
def test_it_saves_one_log_sum_exp_per_query_where_the_rule_saves_all_weights(name, steps, saved_shape):
    """At most one tile long, the cpu handler runs the rule: its weights are one tile per head."""
    qkv = numpy.random.default_rng(0).standard_normal((2, steps, 12))
    handler = create_handler(name, dtype="float64")
    with handler.tape() as tape:
        x = handler.asarray(qkv)
        tape.watch(x)
        handler.op("attention", x, heads=2)
        (saved, _params) = tape._records[-1][-1]
    assert (saved if isinstance(saved, numpy.ndarray) else saved[0]).shape == saved_shape


def test_dropout_in_training_runs_the_rule_on_the_cpu_handler():
    """The tiled loops have no random mask; the rule's draw is the numpy handler's, from the same generator."""
    qkv = numpy.random.default_rng(0).standard_normal((2, 5, 6))
    outs = []
    for name in ("cpu", "numpy"):
        handler = create_handler(name, dtype="float64", seed=4)
        outs.append(handler.op("attention", handler.asarray(qkv), dropout=0.4, training=True).to_numpy())
    numpy.testing.assert_allclose(outs[0], outs[1], rtol=1e-13, atol=1e-13)


def test_the_float32_exp_is_within_an_ulp_and_zero_where_exp_underflows():
    """The tiled loops' exp (sigmann_attention.cpu_exp.exp32) over its domain x ≤ 0: Cephes' polynomial and exact
    powers of two, so one float32 rounding from e^x; 0 at −inf (hidden scores) and past float32's normal range."""
    import numba

    from sigmann_attention.cpu_exp import exp32

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = exp32(x[i])

    x = numpy.concatenate([numpy.linspace(-87.0, 0.0, 100_001), -numpy.geomspace(1e-9, 87.0, 1001)]).astype("float32")
    out = numpy.empty_like(x)
    run(x, out)
    exact = numpy.exp(x.astype("float64"))
    assert numpy.max(numpy.abs(out - exact) / exact) <= float(numpy.finfo("float32").eps)  # ≤ 1 ulp of [1, 2)
    tails = numpy.array([-numpy.inf, -1e4, -88.0, -87.4], dtype="float32")
    run(tails, out[:4])
    assert not out[:4].any()

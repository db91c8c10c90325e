"""The ops against PyTorch: ``attention`` against ``scaled_dot_product_attention``, ``embedding`` against
``F.embedding``, ``gelu`` against ``F.gelu``; forward and backward, random shapes, float64 and float32, on the
numpy and cpu handlers. Then the conformance kit's own checks (finite differences, agreement with the numpy
handler) on each op's examples, and dropout's gradient by finite differences."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import ShapeError, create_handler
from sigmann_testing import HandlerConformance, op_cases

torch = pytest.importorskip("torch", reason="PyTorch is the reference these tests compare with")
packed_sdpa = pytest.importorskip("torch_gpt").packed_sdpa

OPS = ("embedding", "gelu", "attention", "squared_norm")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", range(5))
def test_attention_matches_torch_sdpa(handler_name, dtype, case, taped, close, seeded, torch_grads):
    rng = numpy.random.default_rng(300 + case)
    heads, head_width = int(rng.integers(1, 4)), int(rng.integers(1, 9))
    batch, steps = int(rng.integers(1, 4)), int(rng.choice([1, 2, 7, 16, 33]))
    qkv = rng.standard_normal((batch, steps, 3 * heads * head_width)).astype(dtype)
    handler = create_handler(handler_name, dtype=dtype)
    out, (grad,) = taped(handler, "attention", [qkv], seeded(dtype), heads=heads)
    expected, (expected_grad,) = torch_grads(lambda t: packed_sdpa(t, heads), [qkv], seeded(dtype)(out.shape), [0])
    depth = steps * head_width * 4  # a query's scores and weighted sum, and their gradients through the softmax
    assert out.dtype == grad.dtype == dtype
    close(out, expected, dtype, depth, "output")
    close(grad, expected_grad, dtype, depth, "gradient of qkv")


@pytest.mark.parametrize("causal", [True, False])
def test_attention_padding_mask_matches_torch(handler_name, causal, taped, close, seeded, torch_grads):
    rng = numpy.random.default_rng(5)
    qkv = rng.standard_normal((3, 6, 12))
    mask = numpy.array([[1] * 6, [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=float)  # padding on the right
    handler = create_handler(handler_name, dtype="float64")
    out, (grad,) = taped(handler, "attention", [qkv, mask], seeded("float64"), watched=[0], heads=2, causal=causal)
    expected, (expected_grad,) = torch_grads(lambda t, m: packed_sdpa(t, 2, mask, causal), [qkv, mask],
                                             seeded("float64")(out.shape), [0])
    close(out, expected, "float64", 6 * 2 * 4, "output")
    close(grad, expected_grad, "float64", 6 * 2 * 4, "gradient of qkv")


def test_attention_dropout_drops_weights_and_keeps_the_gradient_exact(handler_name):
    """With p = 0.5 about half the weights go; the op's gradient is the VJP of the draw it made (finite
    differences with the generator reset, as the conformance kit checks random ops), and evaluation drops none."""
    handler = create_handler(handler_name, dtype="float64", seed=3)
    qkv = numpy.random.default_rng(0).standard_normal((2, 5, 6))
    state = handler.rng_state()

    def run(values, training=True):
        handler.set_rng_state(state)
        return handler.op("attention", handler.asarray(values), heads=1, dropout=0.5, training=training).to_numpy()

    full = run(qkv, training=False)
    dropped = run(qkv)
    assert not numpy.allclose(dropped, full)
    numpy.testing.assert_array_equal(run(qkv), dropped)  # the same draw after the same reset
    weights = numpy.random.default_rng(1).standard_normal(full.shape)
    handler.set_rng_state(state)
    with handler.tape() as tape:
        x = handler.asarray(qkv)
        tape.watch(x)
        (grad,) = tape.gradient(handler.op("attention", x, heads=1, dropout=0.5, training=True), [x],
                                seed=handler.asarray(weights))
    step = 1e-6
    for index in [(0, 0, 0), (1, 4, 5), (0, 3, 2), (1, 2, 4)]:
        up, down = qkv.copy(), qkv.copy()
        up[index] += step
        down[index] -= step
        numeric = ((run(up) - run(down)) * weights).sum() / (2 * step)
        assert abs(grad.to_numpy()[index] - numeric) <= 1e-6 * max(1.0, abs(numeric)), index


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_embedding_matches_torch(handler_name, dtype, taped, close, seeded, torch_grads):
    rng = numpy.random.default_rng(11)
    ids, table = rng.integers(0, 9, (4, 7)), rng.standard_normal((9, 5)).astype(dtype)
    handler = create_handler(handler_name, dtype=dtype)
    out, (grad,) = taped(handler, "embedding", [ids, table], seeded(dtype), watched=[1])
    expected, (expected_grad,) = torch_grads(lambda i, w: torch.nn.functional.embedding(i, w), [ids, table],
                                             seeded(dtype)(out.shape), [1])
    numpy.testing.assert_array_equal(out, expected)  # a copy of rows: exact
    close(grad, expected_grad, dtype, ids.size, "gradient of the table")  # a row sums up to every position's


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_matches_torch(handler_name, dtype, approximate, taped, close, seeded, torch_grads):
    x = (numpy.random.default_rng(2).standard_normal((6, 9)) * 3).astype(dtype)
    handler = create_handler(handler_name, dtype=dtype)
    out, (grad,) = taped(handler, "gelu", [x], seeded(dtype), approximate=approximate)
    expected, (expected_grad,) = torch_grads(lambda t: torch.nn.functional.gelu(t, approximate=approximate), [x],
                                             seeded(dtype)(out.shape), [0])
    close(out, expected, dtype, 8, "output")  # a handful of chained elementwise roundings
    close(grad, expected_grad, dtype, 8, "gradient")


def test_out_of_vocabulary_ids_and_bad_shapes_name_the_op():
    handler = create_handler("numpy", dtype="float64")
    table = handler.asarray(numpy.zeros((4, 2)))
    with pytest.raises(ShapeError, match=r"embedding: token id 4 is outside the vocabulary 0\.\.3"):
        handler.op("embedding", handler.asarray(numpy.array([1, 4])), table)
    with pytest.raises(ShapeError, match=r"embedding: token id -1 is outside"):
        handler.op("embedding", handler.asarray(numpy.array([-1, 0])), table)
    with pytest.raises(ShapeError, match=r"attention: takes qkv .* divisible by heads = 4"):
        handler.op("attention", handler.asarray(numpy.zeros((1, 3, 6))), heads=4)
    with pytest.raises(ShapeError, match=r"attention: mask shape \(1, 2\) is not qkv's"):
        handler.op("attention", handler.asarray(numpy.zeros((1, 3, 6))), handler.asarray(numpy.ones((1, 2))))
    with pytest.raises(ShapeError, match="gelu: approximate must be"):
        handler.op("gelu", handler.asarray(numpy.zeros(3)), approximate="erf")


# -- the conformance kit on this distribution's ops: what a handler's HandlerConformance runs on them ----------
CASES = [case for case in op_cases() if case.op in OPS]


def test_every_op_has_examples():
    assert {case.op for case in CASES} == set(OPS)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_conformance_kit_passes_on_the_ops(handler_name, case):
    class Kit(HandlerConformance):
        handler_factory = staticmethod(lambda dtype, seed: create_handler(handler_name, dtype=dtype, seed=seed))

    kit = Kit()
    kit.test_gradient_matches_finite_differences(case)
    for dtype in ("float32", "float64"):
        reference = create_handler("numpy", dtype=dtype, seed=0)
        kit.test_forward_matches_reference(kit.make_handler(dtype), reference, case)
        kit.test_gradient_matches_reference(kit.make_handler(dtype), reference, case)

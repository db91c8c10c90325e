"""The vision ops against PyTorch's conv2d, max_pool2d, avg_pool2d, batch_norm and layer_norm: forward and
backward, on random shapes, strides, paddings, dilations and groups, in float64 and float32, on the numpy and
cpu handlers. Skipped only where PyTorch is not installed (the test extra installs it)."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import create_handler
from sigmann_vision.geometry import resolve_padding

torch = pytest.importorskip("torch", reason="PyTorch is the reference these tests compare with")


def random_geometry(rng, spatial_max=9):
    """A random convolution that fits: (x shape, weight shape, stride, padding, dilation, groups)."""
    while True:
        groups = int(rng.choice([1, 1, 2, 3]))
        c, o = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
        kernel = tuple(int(k) for k in rng.integers(1, 4, 2))
        stride, dilation = tuple(int(s) for s in rng.integers(1, 4, 2)), tuple(int(d) for d in rng.integers(1, 3, 2))
        padding = tuple(int(p) for p in rng.integers(0, 3, 4))
        hw = tuple(int(n) for n in rng.integers(3, spatial_max, 2))
        fits = all(n + a + b >= (k - 1) * d + 1
                   for n, k, d, a, b in zip(hw, kernel, dilation, padding[0::2], padding[1::2]))
        if fits:
            return (int(rng.integers(1, 4)), c, *hw), (o, c // groups, *kernel), stride, padding, dilation, groups


def torch_run(fn, values, seed):
    tensors = [torch.tensor(v, requires_grad=True) for v in values]
    out = fn(*tensors)
    out.backward(torch.tensor(seed))
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else numpy.zeros_like(v)
                                  for t, v in zip(tensors, values)]


def compare(handler_name, dtype, name, values, params, reference, depth, taped, close):
    handler = create_handler(handler_name, dtype=dtype)
    values = [v.astype(dtype) for v in values]
    out, grads = taped(handler, name, values, lambda shape: numpy.random.default_rng(7).standard_normal(shape).astype(dtype),
                       **params)
    expected, expected_grads = torch_run(reference, values, numpy.random.default_rng(7).standard_normal(out.shape).astype(dtype))
    close(out, expected, dtype, depth, f"{name} output")
    for i, (a, b) in enumerate(zip(grads, expected_grads)):
        close(a, b, dtype, depth, f"{name} gradient of input {i}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", range(6))
def test_conv2d_matches_torch(handler_name, dtype, case, taped, close):
    rng = numpy.random.default_rng(100 + case)
    x_shape, w_shape, stride, padding, dilation, groups = random_geometry(rng)
    values = [rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])]
    top, bottom, left, right = padding

    def reference(x, w, b):
        return torch.nn.functional.conv2d(torch.nn.functional.pad(x, (left, right, top, bottom)), w, b, stride=stride,
                                          dilation=dilation, groups=groups)

    depth = int(numpy.prod(w_shape[1:])) * x_shape[0] * 8  # the weight gradient sums over the batch and pixels
    compare(handler_name, dtype, "conv2d", values, dict(stride=stride, padding=padding, dilation=dilation,
                                                       groups=groups), reference, depth, taped, close)


def test_same_padding_matches_torch(handler_name, taped, close):
    rng = numpy.random.default_rng(5)
    values = [rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 4, 3))]
    padding = resolve_padding("same", (7, 6), (4, 3), (1, 1), (2, 1), "conv")
    compare(handler_name, "float64", "conv2d", values, dict(padding=padding, dilation=(2, 1)),
            lambda x, w: torch.nn.functional.conv2d(x, w, padding="same", dilation=(2, 1)), 200, taped, close)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", range(4))
def test_pooling_matches_torch(handler_name, kind, dtype, case, taped, close):
    rng = numpy.random.default_rng(200 + case)
    kernel = tuple(int(k) for k in rng.integers(1, 4, 2))
    stride = tuple(int(s) for s in rng.integers(1, 4, 2))
    padding = tuple(int(rng.integers(0, k // 2 + 1)) for k in kernel)
    shape = (2, int(rng.integers(1, 4)), *(int(n) for n in rng.integers(4, 9, 2)))
    pool = getattr(torch.nn.functional, f"{kind}_pool2d")
    compare(handler_name, dtype, f"{kind}_pool2d", [rng.standard_normal(shape)],
            dict(kernel=kernel, stride=stride, padding=(padding[0], padding[0], padding[1], padding[1])),
            lambda x: pool(x, kernel, stride, padding), 16, taped, close)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_max_pool_2x2_matches_torch(handler_name, dtype, taped, close):
    """The usual 2×2 window at stride 2 (the cpu kernel's own loop), on odd sizes whose last row and column no
    window reads."""
    x = numpy.random.default_rng(13).standard_normal((3, 4, 7, 9))
    compare(handler_name, dtype, "max_pool2d", [x], dict(kernel=(2, 2)), lambda t: torch.nn.functional.max_pool2d(t, 2),
            4, taped, close)


@pytest.mark.parametrize("activation", ["none", "relu"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (16, 5)])
def test_batch_norm_matches_torch(handler_name, training, dtype, shape, activation, taped, close):
    rng = numpy.random.default_rng(9)
    c = shape[1]
    x, gamma, beta = rng.standard_normal(shape) * 2 + 1, rng.standard_normal(c), rng.standard_normal(c)
    mean, var = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    handler = create_handler(handler_name, dtype=dtype)
    running = [handler.asarray(mean), handler.asarray(var)]
    with handler.tape() as tape:
        arrays = [handler.asarray(v.astype(dtype)) for v in (x, gamma, beta)]
        tape.watch(*arrays)
        out = handler.op("batch_norm", *arrays, *running, training=training, momentum=0.2, eps=1e-3,
                         activation=activation)
        seed = numpy.random.default_rng(7).standard_normal(shape).astype(dtype)
        grads = [g.to_numpy() for g in tape.gradient(out, arrays, seed=handler.asarray(seed))]
    torch_mean, torch_var = torch.tensor(mean.astype(dtype)), torch.tensor(var.astype(dtype))
    after = torch.relu if activation == "relu" else (lambda t: t)
    expected, expected_grads = torch_run(
        lambda *t: after(torch.nn.functional.batch_norm(t[0], torch_mean, torch_var, t[1], t[2], training=training,
                                                        momentum=0.2, eps=1e-3)),
        [v.astype(dtype) for v in (x, gamma, beta)], seed)
    depth = x.size // c
    close(out.to_numpy(), expected, dtype, depth, "output")
    for i, (a, b) in enumerate(zip(grads, expected_grads)):
        close(a, b, dtype, depth, f"gradient of input {i}")
    close(running[0].to_numpy(), torch_mean.numpy(), dtype, depth, "running mean")
    close(running[1].to_numpy(), torch_var.numpy(), dtype, depth, "running var")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_layer_norm_matches_torch(handler_name, dtype, taped, close):
    rng = numpy.random.default_rng(11)
    values = [rng.standard_normal((6, 20)) * 3 - 1, rng.standard_normal(20), rng.standard_normal(20)]
    compare(handler_name, dtype, "layer_norm", values, dict(eps=1e-4),
            lambda x, g, b: torch.nn.functional.layer_norm(x, (20,), g, b, eps=1e-4), 20, taped, close)

"""``adamw`` against ``torch.optim.AdamW`` with a no-decay group and ``clip_grad_norm_``; the ``warm_up_cosine``
schedule's shape; AdamW's state through a checkpoint."""

from __future__ import annotations

import math

import numpy
import pytest

from sigma_core import build, create_handler

torch = pytest.importorskip("torch", reason="PyTorch is the reference these tests compare with")

SHAPES = {"1-dense.weights": (4, 3), "1-dense.biases": (3,), "2-norm.gamma": (3,)}


@pytest.mark.parametrize("clip_norm", [0.0, 0.5, 100.0], ids=["no-clip", "clipping", "under-the-clip"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_adamw_matches_torch(handler_name, dtype, clip_norm):
    rng = numpy.random.default_rng(0)
    values = {pid: rng.standard_normal(shape).astype(dtype) for pid, shape in SHAPES.items()}
    handler = create_handler(handler_name, dtype=dtype)
    ours = build("optimiser", {"type": "adamw", "learning_rate": 0.05, "weight_decay": 0.3, "clip_norm": clip_norm,
                               "no_decay": ["*.biases", "*.gamma"]})
    params = {pid: handler.keep(handler.asarray(v)) for pid, v in values.items()}
    tensors = {pid: torch.tensor(v, requires_grad=True) for pid, v in values.items()}
    theirs = torch.optim.AdamW([{"params": [tensors["1-dense.weights"]]},
                                {"params": [tensors["1-dense.biases"], tensors["2-norm.gamma"]], "weight_decay": 0.0}],
                               lr=0.05, weight_decay=0.3)
    norms = []
    for step in range(6):
        grads = {pid: rng.standard_normal(shape).astype(dtype) * (step + 1) for pid, shape in SHAPES.items()}
        ours.step(handler, params, {pid: handler.asarray(g) for pid, g in grads.items()})
        for pid, g in grads.items():
            tensors[pid].grad = torch.tensor(g)
        if clip_norm:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(tensors.values()), clip_norm)))
            assert ours.published["gradient_norm"] == pytest.approx(norms[-1], rel=10 * float(numpy.finfo(dtype).eps))
        theirs.step()
        for pid, tensor in tensors.items():
            # a few roundings per step, each relative to the parameter; √v̂ + eps divides them by a gradient
            # of the same size, so they stay near eps of the parameter
            bound = float(numpy.finfo(dtype).eps) * 16 * (step + 1)
            numpy.testing.assert_allclose(params[pid].to_numpy(), tensor.detach().numpy(), rtol=bound, atol=bound,
                                          err_msg=f"{pid} after step {step + 1}")
    if clip_norm == 0.5:
        assert min(norms) > clip_norm  # every step was clipped
    if clip_norm == 100.0:
        assert max(norms) < clip_norm  # none was


def test_adamw_decays_only_what_no_pattern_excludes():
    handler = create_handler("numpy", dtype="float64")
    adamw = build("optimiser", {"type": "adamw", "learning_rate": 0.1, "weight_decay": 0.5})
    params = {pid: handler.keep(handler.asarray(numpy.full(shape, 2.0))) for pid, shape in SHAPES.items()}
    adamw.step(handler, params, {pid: handler.zeros(shape) for pid, shape in SHAPES.items()})  # Adam's step: 0
    numpy.testing.assert_array_equal(params["1-dense.weights"].to_numpy(), 2.0 * (1 - 0.1 * 0.5))
    numpy.testing.assert_array_equal(params["1-dense.biases"].to_numpy(), 2.0)  # default no_decay: biases,
    numpy.testing.assert_array_equal(params["2-norm.gamma"].to_numpy(), 2.0)  # norms' gamma and beta


def test_adamw_state_resumes_exactly():
    rng = numpy.random.default_rng(1)
    handler = create_handler("numpy", dtype="float64")
    settings = {"type": "adamw", "learning_rate": 0.01, "clip_norm": 1.0, "no_decay": "*.biases"}
    first, grads = build("optimiser", settings), [{pid: rng.standard_normal(s) for pid, s in SHAPES.items()}
                                                  for _ in range(4)]
    start = {pid: rng.standard_normal(s) for pid, s in SHAPES.items()}
    params = {pid: handler.keep(handler.asarray(v)) for pid, v in start.items()}
    for g in grads:
        first.step(handler, params, {pid: handler.asarray(v) for pid, v in g.items()})
    again = {pid: handler.keep(handler.asarray(v)) for pid, v in start.items()}
    second = build("optimiser", settings)
    for g in grads[:2]:
        second.step(handler, again, {pid: handler.asarray(v) for pid, v in g.items()})
    resumed = build("optimiser", {"type": "adamw"})
    resumed.load_state_dict(second.state_dict(), handler)
    assert (resumed.clip_norm, resumed.no_decay) == (1.0, ["*.biases"])
    for g in grads[2:]:
        resumed.step(handler, again, {pid: handler.asarray(v) for pid, v in g.items()})
    for pid in SHAPES:
        numpy.testing.assert_array_equal(again[pid].to_numpy(), params[pid].to_numpy())


def test_warm_up_cosine_rises_linearly_then_decays_to_the_minimum():
    schedule = build("hook", {"type": "warm_up_cosine", "period": 110, "warm_up": 10, "minimum": 0.1})
    schedule.base = 2.0
    assert [schedule.rate(t) for t in (0, 5, 10)] == [0.0, 1.0, 2.0]
    assert schedule.rate(60) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5))  # half way down the cosine
    assert schedule.rate(110) == schedule.rate(500) == pytest.approx(0.2)
    rates = [schedule.rate(t) for t in range(10, 111)]
    assert all(a > b for a, b in zip(rates, rates[1:]))
    assert math.isclose(schedule.rate(35), 2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4))))

"""A tiny GPT trained 20 AdamW steps (weight decay, clipping, warm-up and cosine) from identical weights in Sigma
and in its PyTorch twin (benchmarks/torch_gpt.py): the costs and every parameter agree after every step, with the
output layer its own and tied to the embedding's table (one parameter, two uses: its gradients add up)."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import Network, Trainer, build, create_handler
from sigmann_attention import GPT

torch = pytest.importorskip("torch", reason="PyTorch is the reference these tests compare with")
torch_gpt = pytest.importorskip("torch_gpt")

VOCABULARY, CONTEXT, WIDTH, HEADS, LAYERS, BATCH, STEPS = 11, 8, 16, 2, 2, 4, 20
ADAMW = {"learning_rate": 0.01, "weight_decay": 0.1, "no_decay": ["*.biases", "*.gamma", "*.beta"], "clip_norm": 2.0}
#: The tied network's gradients are smaller (its output starts at N(0, 0.02²)): a clip that acts on some steps, not all.
CLIP_TIED = 1.0
SCHEDULE = {"period": STEPS, "warm_up": 5, "minimum": 0.1}


@pytest.mark.parametrize("tie_weights", [False, True], ids=["untied", "tied"])
def test_tiny_gpt_trains_step_by_step_like_its_pytorch_twin(handler_name, tie_weights):
    settings = {**ADAMW, "clip_norm": CLIP_TIED} if tie_weights else ADAMW
    torch.manual_seed(0)
    handler = create_handler(handler_name, dtype="float64", seed=0)
    trainer = Trainer(Network(GPT(VOCABULARY, CONTEXT, WIDTH, HEADS, LAYERS, tie_weights=tie_weights)),
                      build("optimiser", {"type": "adamw", **settings}), training_iterator=[])
    trainer.initialise(handler)
    assert ("logits.weights" in trainer.network.parameters) is not tie_weights
    twin = torch_gpt.TorchGPT(VOCABULARY, CONTEXT, WIDTH, HEADS, LAYERS, tie_weights).double()
    torch_gpt.load_sigma(twin, {pid: p.to_numpy() for pid, p in trainer.network.parameters.items()})
    optimiser = torch_gpt.adamw(twin, ADAMW["learning_rate"], ADAMW["weight_decay"], ADAMW["no_decay"])
    schedule = build("hook", {"type": "warm_up_cosine", **SCHEDULE, "base": ADAMW["learning_rate"]})
    rng = numpy.random.default_rng(0)
    clipped = 0
    for step in range(STEPS):
        text = rng.integers(0, VOCABULARY, (BATCH, CONTEXT + 1))
        rate = schedule.rate(step)
        assert rate == pytest.approx(ADAMW["learning_rate"] * torch_gpt.warm_up_cosine(step, **SCHEDULE), rel=1e-15)
        trainer.optimiser.learning_rate = rate
        for group in optimiser.param_groups:
            group["lr"] = rate
        cost = float(trainer.run_iteration({"inputs": text[:, :-1], "targets": text[:, 1:, None]}))
        expected = torch_gpt.train_step(twin, optimiser, torch.tensor(text[:, :-1]), torch.tensor(text[:, 1:]),
                                        settings["clip_norm"])
        clipped += trainer.optimiser.published["gradient_norm"] > settings["clip_norm"]
        # float64 throughout: the two frameworks sum in other orders, ~1e-16 per rounding over sums of
        # B·T·4·width terms, and Adam's step divides an update by √v̂, which keeps it relative to the gradient
        assert cost == pytest.approx(expected, rel=1e-12), f"cost at step {step + 1}"
        theirs = torch_gpt.read_sigma(twin)
        for pid, param in trainer.network.parameters.items():
            numpy.testing.assert_allclose(param.to_numpy(), theirs[pid], rtol=1e-9, atol=1e-11,
                                          err_msg=f"{pid} after step {step + 1}")
    assert 0 < clipped < STEPS  # the clip acted on some steps, not all

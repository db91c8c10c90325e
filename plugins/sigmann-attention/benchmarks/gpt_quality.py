"""Quality: the validation loss of examples/gpt_chars.toml trained by ``sigma train`` against its PyTorch twin
trained the same way on the same text and split.

The twin (benchmarks/torch_gpt.py) takes every setting from the run file: the
network's sizes, AdamW's (learning rate, betas, weight decay, no-decay globs,
clipping), the ``warm_up_cosine`` schedule, the batch size, the epochs, and the
windows and split (the ``chars`` extractor's windows of ``data.sequence``
characters every ``data.stride``, the last ``split.validation`` of them held
out). It starts from GPT-2's initialisation, as Sigma's layers do (N(0, 0.02²)
weights, zero biases, unit norms) and shuffles its batches with its own
generator. Both models are then scored the same way here: the mean cross-entropy
of every held-out window's every position, in nats and bits per character.

Usage (after ``sigma train examples/gpt_chars.toml --set data.path=TEXT``):
``python plugins/sigmann-attention/benchmarks/gpt_quality.py TEXT CHECKPOINT [--threads N]``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[2] / "examples" / "gpt_chars.toml"
sys.path.insert(0, str(HERE))  # torch_gpt, the twin


def windows(text, config):
    """(training, held-out) dicts of inputs (N, T) and targets (N, T), as the run file's data and split cut them."""
    from sigma_core import split_bounds
    from sigmann_text.chars import chars

    data = config["data"]
    parts = list(chars(text, sequence=data["sequence"], stride=data.get("stride")))
    inputs = np.concatenate([p["inputs"] for p in parts]).astype(np.int64)
    targets = np.concatenate([p["targets"] for p in parts])[..., 0].astype(np.int64)
    validation = config["split"]["validation"]
    _, cut, end = split_bounds(len(inputs), [1 - validation, validation], "text")
    return (inputs[:cut], targets[:cut]), (inputs[cut:end], targets[cut:end])


def cross_entropy(logits, targets):
    """Mean −log softmax(logits)[target] over every position, in float64."""
    logits = logits.astype(np.float64).reshape(-1, logits.shape[-1])
    top = logits.max(axis=1, keepdims=True)
    log_total = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
    return float(np.mean(log_total - logits[np.arange(len(logits)), targets.reshape(-1)]))


def sigma_loss(checkpoint, held_out, batch=256):
    from sigma_core import Network, create_handler, from_layer_list, load_checkpoint

    saved = load_checkpoint(checkpoint)
    network = Network(from_layer_list(saved.config["network"]["layers"]))
    network.initialise(create_handler("cpu", dtype="float32", seed=0))
    network.load_state_dict(saved.parameters)
    inputs, targets = held_out
    logits = np.concatenate([network.predict(inputs[i : i + batch]) for i in range(0, len(inputs), batch)])
    return cross_entropy(logits, targets)


def torch_loss(config, training, held_out):
    import torch
    import torch_gpt

    torch.manual_seed(0)
    layers = {spec.get("name"): spec for spec in config["network"]["layers"]}
    blocks = sum(1 for name in layers if name and name.endswith("-attention"))
    model = torch_gpt.TorchGPT(layers["embedding"]["vocabulary"], layers["positional"]["context"],
                               layers["embedding"]["size"], layers["block0-attention"]["heads"], blocks)
    for name, tensor in model.named_parameters():  # GPT-2's initialisation, as Sigma's layers start
        with torch.no_grad():
            if "norm" in name:
                tensor.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                tensor.zero_()
            else:
                tensor.normal_(0.0, 0.02)
    opt = config["optimiser"]
    optimiser = torch_gpt.adamw(model, opt["learning_rate"], opt["weight_decay"], opt["no_decay"],
                                betas=(opt.get("beta1", 0.9), opt.get("beta2", 0.999)), eps=opt.get("eps", 1e-8))
    schedule = next(h for h in config["hooks"] if h["type"] == "warm_up_cosine")
    batch, epochs = config["training"]["batch_size"], config["training"]["epochs"]
    rng, step = np.random.default_rng(0), 0
    inputs, targets = (torch.from_numpy(a) for a in training)
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(inputs)))
        for start in range(0, len(order), batch):
            rate = schedule["base"] * torch_gpt.warm_up_cosine(step, schedule["period"], schedule["warm_up"],
                                                               schedule.get("minimum", 0.0))
            for group in optimiser.param_groups:
                group["lr"] = rate
            rows = order[start : start + batch]
            torch_gpt.train_step(model, optimiser, inputs[rows], targets[rows], opt.get("clip_norm", 0.0))
            step += 1
    with torch.no_grad():
        logits = torch.cat([model(torch.from_numpy(held_out[0][i : i + 256])) for i in range(0, len(held_out[0]), 256)])
    return cross_entropy(logits.numpy(), held_out[1]), step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text", help="the text the run trained on (its data.path)")
    parser.add_argument("checkpoint", help="the checkpoint sigma train saved at its end")
    parser.add_argument("--threads", type=int, help="PyTorch's threads (default: its own choice)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    config = tomllib.loads(EXAMPLE.read_text())
    training, held_out = windows(args.text, config)
    ours = sigma_loss(args.checkpoint, held_out)
    started = time.perf_counter()
    theirs, steps = torch_loss(config, training, held_out)
    print(f"{args.text}: {os.path.getsize(args.text):,} bytes, {len(training[0]):,} training and {len(held_out[0]):,} "
          f"held-out windows; PyTorch twin: {steps} steps in {time.perf_counter() - started:.0f} s")
    for name, loss in (("sigma", ours), ("torch", theirs)):
        print(f"  {name}: validation loss {loss:.4f} nats, {loss / math.log(2):.4f} bits per character")
    print(f"  sigma / torch: {ours / theirs:.4f} ({100 * (ours / theirs - 1):+.2f} %)")


if __name__ == "__main__":
    main()

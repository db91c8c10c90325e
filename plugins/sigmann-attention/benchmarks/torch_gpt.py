"""The PyTorch twin of ``sigmann_attention.GPT`` (and of examples/gpt_chars.toml), for comparisons, not a dependency.

The same layout as Sigma's network: token and position tables, pre-norm blocks
of causal self-attention (one qkv projection, PyTorch's
``scaled_dot_product_attention``) and a GELU MLP, a final norm and an output
layer (with ``tie_weights``, one without bias sharing the embedding's table, as
nanoGPT's ``lm_head.weight = wte.weight`` and Sigma's ``tied_logits``); AdamW
with the same decay exclusion and global-norm clipping, and the same warm-up
and cosine schedule. :func:`load_sigma` copies a Sigma network's parameters in
(Sigma's dense weights are (in, out), PyTorch's (out, in)) and
:func:`sigma_view` reads them back out by Sigma's ids, so a test can start both
from identical weights and compare them step by step (tests/test_gpt_torch.py);
``python gpt_quality.py`` trains both on a text.
"""

from __future__ import annotations

import fnmatch
import math

import torch
from torch import nn


def packed_sdpa(qkv, heads, mask=None, causal=True):
    """PyTorch's SDPA on packed (batch, T, 3·width) projections, heads side by side, as Sigma's ``attention`` op
    takes them; ``mask`` (batch, T) hides the keys where it is 0."""
    batch, steps, width3 = qkv.shape
    q, k, v = (t.transpose(1, 2) for t in qkv.reshape(batch, steps, 3, heads, width3 // (3 * heads)).unbind(2))
    if mask is None:
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        keep = torch.as_tensor(mask, dtype=torch.bool)[:, None, None, :]
        if causal:
            keep = keep & torch.ones(steps, steps, dtype=torch.bool).tril()
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return out.transpose(1, 2).reshape(batch, steps, width3 // 3)


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.out(packed_sdpa(self.qkv(self.norm1(x)), self.heads))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


class TorchGPT(nn.Module):
    """ids (batch, T) -> logits (batch, T, vocabulary)."""

    def __init__(self, vocabulary, context, width, heads, layers, tie_weights=False):
        super().__init__()
        self.tie_weights = tie_weights
        self.embedding = nn.Embedding(vocabulary, width)
        self.positional = nn.Parameter(torch.zeros(context, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.logits = nn.LayerNorm(width), nn.Linear(width, vocabulary, bias=not tie_weights)
        if tie_weights:
            self.logits.weight = self.embedding.weight

    def forward(self, ids):
        x = self.embedding(ids) + self.positional[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.logits(self.norm(x))

    def cost(self, ids, targets):
        """Mean cross-entropy over every position, as Sigma's softmax_ce."""
        logits = self.forward(ids)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def sigma_view(model: TorchGPT) -> dict:
    """Sigma's parameter id -> (the PyTorch tensor, whether it is Sigma's transposed)."""
    view = {"embedding.weights": (model.embedding.weight, False), "positional.weights": (model.positional, False),
            "norm.gamma": (model.norm.weight, False), "norm.beta": (model.norm.bias, False)}
    if not model.tie_weights:  # tied: the output layer's weights are embedding.weights
        view.update({"logits.weights": (model.logits.weight, True), "logits.biases": (model.logits.bias, False)})
    for b, block in enumerate(model.blocks):
        for norm in ("norm1", "norm2"):
            view[f"block{b}-{norm}.gamma"] = (getattr(block, norm).weight, False)
            view[f"block{b}-{norm}.beta"] = (getattr(block, norm).bias, False)
        for sigma, linear in (("attention.qkv", block.qkv), ("attention.out", block.out)):
            view[f"block{b}-{sigma}_weights"] = (linear.weight, True)
            view[f"block{b}-{sigma}_biases"] = (linear.bias, False)
        for sigma, linear in (("mlp_up", block.up), ("mlp_down", block.down)):
            view[f"block{b}-{sigma}.weights"] = (linear.weight, True)
            view[f"block{b}-{sigma}.biases"] = (linear.bias, False)
    return view


def load_sigma(model: TorchGPT, parameters: dict) -> None:
    """Copy Sigma's parameters (id -> NumPy array) into ``model``."""
    view = sigma_view(model)
    if set(view) != set(parameters):
        raise ValueError(f"parameter ids differ: {sorted(set(view) ^ set(parameters))}")
    with torch.no_grad():
        for pid, (tensor, transposed) in view.items():
            value = torch.as_tensor(parameters[pid], dtype=tensor.dtype)
            tensor.copy_(value.T if transposed else value)


def read_sigma(model: TorchGPT) -> dict:
    """``model``'s parameters by Sigma's id, laid out as Sigma's (NumPy)."""
    return {pid: (t.T if transposed else t).detach().numpy().copy()
            for pid, (t, transposed) in sigma_view(model).items()}


def adamw(model: TorchGPT, learning_rate, weight_decay, no_decay, betas=(0.9, 0.999), eps=1e-8):
    """torch.optim.AdamW with parameters whose Sigma id matches a ``no_decay`` glob in a group without decay."""
    decayed, kept = [], []
    for pid, (tensor, _) in sigma_view(model).items():
        (kept if any(fnmatch.fnmatchcase(pid, p) for p in no_decay) else decayed).append(tensor)
    return torch.optim.AdamW([{"params": decayed, "weight_decay": weight_decay},
                              {"params": kept, "weight_decay": 0.0}], lr=learning_rate, betas=betas, eps=eps)


def warm_up_cosine(t, period, warm_up, minimum):
    """The learning rate's factor at step ``t`` (from 0): linear warm-up, then cosine to ``minimum``."""
    if t < warm_up:
        return t / warm_up
    progress = min(t - warm_up, period - warm_up) / (period - warm_up)
    return minimum + (1.0 - minimum) * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_step(model, optimiser, ids, targets, clip_norm) -> float:
    """One AdamW step on a batch; returns its cost (before the step)."""
    optimiser.zero_grad(set_to_none=True)
    cost = model.cost(ids, targets)
    cost.backward()
    if clip_norm:
        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimiser.step()
    return float(cost.detach())

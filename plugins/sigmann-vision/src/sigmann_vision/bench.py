"""``sigma bench --workloads cnn``: the MNIST CNN's training step, Sigma against PyTorch eager and its GEMMs alone.

Joined to sigmann-bench through its ``sigmann_bench.workloads`` entry-point
group; sigmann-bench times every system in its own process, rounds
alternating. The network is examples/mnist_cnn.toml's without dropout (so every
system computes the same thing), float32, batch 64, Adam 1e-3, on synthetic
MNIST-shaped batches:

    (1, 28, 28) -> conv 32 3×3 same -> batch norm, relu -> max pool 2
    -> conv 64 3×3 same -> batch norm, relu -> max pool 2 -> dense 128 relu -> dense 10 -> softmax CE

Systems: ``sigma-<handler>`` for each handler asked for (recorded steps
replayed, as ``sigma train`` runs them); ``pytorch-eager`` (when importable)
from the same initial parameters, with as many threads as CPUs this process
may use (what BLAS uses for our GEMMs); ``gemms-only``, the matrix products
of one step (each convolution's forward, weight-gradient and column-gradient
GEMM over im2col columns, the dense layers'), BLAS into preallocated outputs:
the floor for an im2col design. The GEMMs take the threads BLAS takes.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

BATCH = 64
DTYPE = np.float32


def threads() -> int:
    """The CPUs this process may use: the thread count given to PyTorch, and what BLAS uses by default."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def architecture():
    from sigma_core import Dense, Input, SoftmaxCE

    from . import BatchNorm, Conv2D, Flatten, MaxPool2D, Reshape

    return (Input(28, 28) + Reshape([1, 28, 28]) + Conv2D(32, 3, padding="same", name="conv1")
            + BatchNorm(activation="relu", name="bn1") + MaxPool2D(2) + Conv2D(64, 3, padding="same", name="conv2")
            + BatchNorm(activation="relu", name="bn2") + MaxPool2D(2) + Flatten() + Dense(128, "relu", name="fc1")
            + Dense(10, name="fc2") + SoftmaxCE())


def build_trainer(handler="numpy", seed=0):
    """The workload's trainer on a fresh float32 handler, steps compiled as ``sigma train`` compiles them."""
    from sigma_core import Adam, Network, Trainer, create_handler, step_compiler

    trainer = Trainer(Network(architecture(), name="cnn"), Adam(1e-3), training_iterator=[])
    trainer.initialise(create_handler(handler, dtype="float32", seed=seed))
    trainer.compile_step(step_compiler("auto"))
    return trainer


def make_batches(n=20, seed=1234):
    rng = np.random.default_rng(seed)
    return [{"inputs": rng.random((BATCH, 28, 28), dtype=DTYPE), "targets": rng.integers(0, 10, BATCH)}
            for _ in range(n)]


def systems(handlers) -> list[str]:
    names = [f"sigma-{name}" for name in handlers] + ["gemms-only"]
    return names + (["pytorch-eager"] if importlib.util.find_spec("torch") else [])


def make_step(system):
    if system.startswith("sigma-"):
        return build_trainer(system.removeprefix("sigma-")).run_iteration
    state = build_trainer("numpy").network.state_dict()  # seeded: the same initial parameters everywhere
    return {"gemms-only": gemms_only, "pytorch-eager": torch_step}[system](state)


def gemms_only(state):
    """The step's matrix products alone (see the module docstring)."""
    rng = np.random.default_rng(0)
    products = []  # (a, b, out)

    def product(a_shape, b_shape):
        a, b = rng.random(a_shape, dtype=DTYPE), rng.random(b_shape, dtype=DTYPE)
        products.append((a, b, np.empty((a_shape[0], b_shape[1]), DTYPE)))

    for channels, depth, pixels, first in ((32, 9, BATCH * 28 * 28, True), (64, 32 * 9, BATCH * 14 * 14, False)):
        product((channels, depth), (depth, pixels))  # forward: weights · columns
        product((channels, pixels), (pixels, depth))  # weight gradient: gradient · columnsᵀ
        if not first:
            product((depth, channels), (channels, pixels))  # column gradient: weightsᵀ · gradient
    for fan_in, size, first in ((64 * 7 * 7, 128, True), (128, 10, False)):
        product((BATCH, fan_in), (fan_in, size))
        product((fan_in, BATCH), (BATCH, size))
        product((BATCH, size), (size, fan_in))

    def step(batch):
        for a, b, out in products:
            np.matmul(a, b, out=out)
        return 0.0

    return step


def torch_step(state):
    """PyTorch eager on the same network and initial parameters, as many threads as CPUs here."""
    import torch

    torch.set_num_threads(threads())
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    with torch.no_grad():
        for index, name in ((0, "conv1"), (4, "conv2")):
            model[index].weight.copy_(torch.from_numpy(state[f"{name}.weights"]))
            model[index].bias.copy_(torch.from_numpy(state[f"{name}.biases"]))
        for index, name in ((9, "fc1"), (11, "fc2")):
            model[index].weight.copy_(torch.from_numpy(state[f"{name}.weights"].T))
            model[index].bias.copy_(torch.from_numpy(state[f"{name}.biases"]))
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(batch):
        x = torch.from_numpy(batch["inputs"]).reshape(BATCH, 1, 28, 28)
        loss = nn.functional.cross_entropy(model(x), torch.from_numpy(batch["targets"]))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        return loss.item()

    return step


class Workload:
    """What sigmann-bench asks of a workload (``sigmann_bench.bench.extra_workloads``)."""

    batch = BATCH
    systems = staticmethod(systems)
    make_step = staticmethod(make_step)
    make_batches = staticmethod(make_batches)


CNN = Workload()

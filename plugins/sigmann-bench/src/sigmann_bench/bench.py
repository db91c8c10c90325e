"""``sigma bench``: milliseconds per training iteration, Sigma against the alternatives.

Two workloads (issue 4), float32, batch 100, synthetic MNIST-shaped data
(floats in [0, 1), labels 0-9, a few distinct batches cycled):

* ``sigma-mlp``: Sigma's MNIST network, 784 -> Dropout 0.2 -> Dense 1000 relu
  -> Dropout 0.4 -> Dense 800 relu -> Dropout 0.4 -> Dense 10 sigmoid ->
  SoftmaxCE, Adagrad lr 0.02 (eps 1e-6);
* ``small-mlp``: 784 -> Dense 128 relu -> Dense 10 -> SoftmaxCE, SGD lr 0.1,
  no dropout; here per-op overhead weighs the most;
* ``probe`` (only when asked for): the small MLP with 8 hidden units and
  batches of 4, so a step is nearly all framework time;
* ``startup`` (only when asked for): whole ``sigma train`` processes of the
  digits example, ``cpu`` (warm and cold numba cache) against ``numpy``; see
  :mod:`sigmann_bench.startup`.

Systems: every installed handler that can run here (``sigma-<name>``) through
the real framework path (Network, Trainer.run_iteration, replaying recorded
steps as ``sigma train`` does), and the first of them once more with replay off
(``sigma-<name>-unrecorded``: every step taped and dispatched); a hand-written
NumPy loop of the kind a competent NumPy programmer writes (:class:`HandMLP`:
preallocated buffers, ``out=`` everywhere); the GEMMs of one step alone
(``gemms-only``, BLAS with preallocated outputs: the floor for any system
that leaves matrix products to BLAS; with oneMKL installed for the ``cpu``
handler also ``gemms-only-mkl``, its oneMKL products, and ``sigma-cpu-openblas``,
the handler forced back onto NumPy's OpenBLAS); and, only when they are importable
(never dependencies), PyTorch eager with 2 threads and JAX with the whole
step under ``jit``.

Every system runs in its own process (so thread pools do not fight), and
rounds alternate between them (a, b, c, a, b, c, ...) so that drift in
machine load hits all alike; every iteration is timed on its own. Reported:
the median over all timed iterations, the min-max of per-round medians,
samples/s and each system's ratio to ours (the best-ranked Sigma handler).
With the ``cpu`` handler installed, the first iteration's latency in a fresh
process is measured with a cold and then a warm numba cache.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

BATCH = 100
N_BATCHES = 20
DTYPE = np.float32
ADAGRAD_EPS = 1e-6

#: hidden layers as (size, dropout before it); the output layer (10, ``output``) follows.
WORKLOADS = {
    "sigma-mlp": dict(dropouts=(0.2, 0.4, 0.4), hidden=(1000, 800), output="sigmoid", optimiser="adagrad", lr=0.02),
    "small-mlp": dict(dropouts=(0.0, 0.0), hidden=(128,), output="none", optimiser="sgd", lr=0.1),
    "probe": dict(dropouts=(0.0, 0.0), hidden=(8,), output="none", optimiser="sgd", lr=0.1, batch=4),
}
DEFAULT_WORKLOADS = ("sigma-mlp", "small-mlp")

#: (rounds, timed iterations per round, warm-up iterations): >= 200 timed iterations per system.
FULL = (5, 40, 10)
QUICK = (2, 10, 3)


# -- data -----------------------------------------------------------------------------------
def make_batches(seed=1234, n=N_BATCHES, batch=BATCH):
    rng = np.random.default_rng(seed)
    return [
        {
            "inputs": rng.random((batch, 28, 28), dtype=DTYPE),
            "targets": rng.integers(0, 10, size=batch, dtype=np.int64),
        }
        for _ in range(n)
    ]


# -- Sigma ----------------------------------------------------------------------------------
def build_trainer(spec, handler="numpy", seed=0, replay=True):
    """A Trainer for ``spec`` on a fresh float32 handler (a name or an instance), initialised; ``replay``: its
    steps compiled as ``sigma train`` compiles them (``training.compile = "auto"``: recorded steps replayed where
    sigmann-replay is installed), else every step runs as written."""
    from sigma_core import (Dense, Dropout, Gaussian, GradientDescent, Input, Network, SoftmaxCE, Trainer,
                            create_handler, step_compiler)
    from sigmann_optimisers import Adagrad

    layers = Input(28, 28)
    sizes = spec["hidden"] + (10,)
    for i, (p, size) in enumerate(zip(spec["dropouts"], sizes)):
        if p:
            layers = layers + Dropout(p)
        layers = layers + Dense(size, "relu" if i < len(sizes) - 1 else spec.get("output", "none"))
    network = Network(layers + SoftmaxCE(), name=spec.get("name", "network"))
    if spec["optimiser"] == "adagrad":
        optimiser = Adagrad(spec["lr"], eps=ADAGRAD_EPS)
    else:
        optimiser = GradientDescent(spec["lr"])
    trainer = Trainer(
        network,
        optimiser,
        training_iterator=[],
        initialisers={"*.weights": Gaussian(std=0.05), "*.biases": Gaussian(std=0.01)},
    )
    if isinstance(handler, str):
        handler = create_handler(handler, dtype=str(np.dtype(DTYPE)), seed=seed)
    trainer.initialise(handler)
    trainer.compile_step(step_compiler("auto" if replay else "none"))
    return trainer


def dense_parameters(trainer):
    """(weights, biases) host arrays of the dense layers, in network order."""
    state = trainer.network.state_dict()
    return [
        (state[f"{name}.weights"], state[f"{name}.biases"])
        for name in trainer.network.layers
        if f"{name}.weights" in state
    ]


# -- the hand-written NumPy loop ---------------------------------------------------------------
class HandMLP:
    """The same network, forward + backward + update written directly in NumPy.

    ``params`` is a list of (weights, biases) arrays (copied). ``dropouts`` are
    the probabilities before each dense layer (0 for none); hidden layers are
    relu, the last one ``output_activation`` ("none" or "sigmoid"). Every
    buffer is allocated once; an iteration allocates only NumPy's small
    temporaries.
    """

    def __init__(self, params, dropouts, optimiser, lr, rng, batch=BATCH, output_activation="none"):
        self.W = [np.array(w, dtype=DTYPE) for w, _ in params]
        self.b = [np.array(b, dtype=DTYPE) for _, b in params]
        self.p = list(dropouts)
        self.optimiser, self.lr = optimiser, lr
        self.output_activation = output_activation
        self.rng = rng
        n = len(self.W)
        sizes = [w.shape[0] for w in self.W] + [self.W[-1].shape[1]]
        self.rows = np.arange(batch)
        self.masks = [np.empty((batch, sizes[i]), DTYPE) if self.p[i] else None for i in range(n)]
        self.dropped = [np.empty((batch, sizes[i]), DTYPE) if self.p[i] else None for i in range(n)]
        self.h = [np.empty((batch, sizes[i + 1]), DTYPE) for i in range(n)]  # layer outputs
        self.dx = [np.empty((batch, sizes[i]), DTYPE) for i in range(n)]  # grads of layer inputs
        self.relu_mask = [np.empty((batch, sizes[i + 1]), bool) for i in range(n)]
        self.probs = np.empty((batch, sizes[-1]), DTYPE)
        self.out_grad = np.empty((batch, sizes[-1]), DTYPE)
        self.gW = [np.empty_like(w) for w in self.W]
        self.gb = [np.empty_like(b) for b in self.b]
        self.tmpW = [np.empty_like(w) for w in self.W]
        self.tmpb = [np.empty_like(b) for b in self.b]
        self.sqW = [np.zeros_like(w) for w in self.W]
        self.sqb = [np.zeros_like(b) for b in self.b]
        self.row_max = np.empty((batch, 1), DTYPE)
        self.row_sum = np.empty((batch, 1), DTYPE)
        self.inputs = [None] * n

    def step(self, x, labels) -> float:
        n = len(self.W)
        x = x.reshape(x.shape[0], -1)
        # forward
        for i in range(n):
            p = self.p[i]
            if p:
                mask = self.masks[i]
                self.rng.random(out=mask, dtype=DTYPE)
                np.less(mask, 1.0 - p, out=mask)
                mask *= 1.0 / (1.0 - p)
                np.multiply(x, mask, out=self.dropped[i])
                x = self.dropped[i]
            self.inputs[i] = x
            h = self.h[i]
            np.matmul(x, self.W[i], out=h)
            h += self.b[i]
            if i < n - 1:
                np.maximum(h, 0, out=h)
            elif self.output_activation == "sigmoid":  # the overflow-free tanh form
                h *= 0.5
                np.tanh(h, out=h)
                h *= 0.5
                h += 0.5
            x = h
        # softmax cross-entropy, shifted by the row max
        probs = self.probs
        rows = probs.shape[0]
        np.max(x, axis=1, keepdims=True, out=self.row_max)
        np.subtract(x, self.row_max, out=probs)
        picked = probs[self.rows, labels]
        np.exp(probs, out=probs)
        np.sum(probs, axis=1, keepdims=True, out=self.row_sum)
        probs /= self.row_sum
        loss = float(np.mean(np.log(self.row_sum[:, 0]) - picked))
        # backward: d = (softmax - onehot) / rows, through the output activation
        d = probs
        d[self.rows, labels] -= 1.0
        d *= 1.0 / rows
        if self.output_activation == "sigmoid":  # y (1 - y)
            y = self.h[n - 1]
            np.subtract(1.0, y, out=self.out_grad)
            self.out_grad *= y
            d *= self.out_grad
        for i in range(n - 1, -1, -1):
            np.matmul(self.inputs[i].T, d, out=self.gW[i])
            np.sum(d, axis=0, out=self.gb[i])
            if i == 0:
                break
            dx = self.dx[i]
            np.matmul(d, self.W[i].T, out=dx)
            if self.p[i]:
                dx *= self.masks[i]
            np.greater(self.h[i - 1], 0, out=self.relu_mask[i - 1])
            np.multiply(dx, self.relu_mask[i - 1], out=dx)
            d = dx
        # update
        if self.optimiser == "sgd":
            for params, grads, tmps in ((self.W, self.gW, self.tmpW), (self.b, self.gb, self.tmpb)):
                for param, grad, tmp in zip(params, grads, tmps):
                    np.multiply(grad, self.lr, out=tmp)
                    param -= tmp
        else:  # adagrad: sq += g^2; param -= lr * g / (sqrt(sq) + eps)
            for params, grads, sqs, tmps in (
                (self.W, self.gW, self.sqW, self.tmpW),
                (self.b, self.gb, self.sqb, self.tmpb),
            ):
                for param, grad, sq, tmp in zip(params, grads, sqs, tmps):
                    np.multiply(grad, grad, out=tmp)
                    sq += tmp
                    np.sqrt(sq, out=tmp)
                    tmp += ADAGRAD_EPS
                    np.divide(grad, tmp, out=tmp)
                    tmp *= self.lr
                    param -= tmp
        return loss


def build_hand(spec, trainer, rng_state=None):
    """A HandMLP starting from ``trainer``'s current parameters."""
    rng = np.random.Generator(np.random.PCG64(0))
    if rng_state is not None:
        rng.bit_generator.state = rng_state
    return HandMLP(dense_parameters(trainer), spec["dropouts"], spec["optimiser"], spec["lr"], rng,
                   batch=spec.get("batch", BATCH), output_activation=spec.get("output", "none"))


class GemmsOnly:
    """The matrix products of one training step and nothing else, BLAS into preallocated outputs.

    Forward x·W per layer; backward xᵀ·d per layer and d·Wᵀ for every layer
    but the first (the input needs no gradient). What is left of a system's
    time after this is everything else: elementwise passes, the optimiser,
    Python.

    ``provider`` ``"numpy"``: NumPy's ``matmul`` (its OpenBLAS); ``"mkl"``:
    the ``cpu`` handler's own oneMKL products (its kernels' launches, the
    same column blocks and threads as in a training step), so that each
    provider's step is set against its own floor.
    """

    def __init__(self, params, batch=BATCH, provider="numpy"):
        self.W = [np.array(w, dtype=DTYPE) for w, _ in params]
        self.x = [np.ones((batch, w.shape[0]), DTYPE) for w in self.W]
        self.h = [np.empty((batch, w.shape[1]), DTYPE) for w in self.W]
        self.gW = [np.empty_like(w) for w in self.W]
        self.dx = [np.empty_like(x) for x in self.x]  # not into x: feeding back would overflow to inf
        self.products = [(x, w, h) for x, w, h in zip(self.x, self.W, self.h)]  # (a, b, out = a·b), in order
        for i in range(len(self.W) - 1, -1, -1):
            self.products.append((self.x[i].T, self.h[i], self.gW[i]))
            if i:
                self.products.append((self.h[i], self.W[i].T, self.dx[i]))
        self.calls = [functools.partial(np.matmul, a, b, out=out) for a, b, out in self.products] \
            if provider == "numpy" else self._launches(provider, self.products)

    @staticmethod
    def _launches(provider, products):
        """The ``cpu`` handler's launches of ``products`` on ``provider``, chosen for this (worker) process."""
        os.environ["SIGMA_CPU_BLAS"] = provider
        from sigma_cpu.kernels import NumbaKernels

        kernels = NumbaKernels(str(np.dtype(DTYPE)))
        launches = [kernels.launch("matmul", (a, b), {}, out) for a, b, out in products]
        if None in launches:
            raise RuntimeError(f"gemms-only-{provider}: the cpu handler does not run these products on {provider}")
        return launches

    def step(self, x, labels) -> float:
        for call in self.calls:
            call()
        return 0.0


def mkl_installed() -> bool:
    """Whether the ``cpu`` handler can take its products from oneMKL here (looked up, nothing loaded)."""
    if importlib.util.find_spec("sigma_cpu") is None:
        return False
    from sigma_cpu.blas import mkl_library

    return mkl_library() is not None


# -- optional third-party systems (never dependencies) -------------------------------------------
def torch_step(spec, params):
    """PyTorch eager, 2 threads, same network and initial parameters; None if torch is not importable."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(2)
    torch.manual_seed(0)
    weights = [torch.tensor(w, requires_grad=True) for w, _ in params]
    biases = [torch.tensor(b, requires_grad=True) for _, b in params]
    tensors = weights + biases
    if spec["optimiser"] == "adagrad":
        optimiser = torch.optim.Adagrad(tensors, lr=spec["lr"], eps=ADAGRAD_EPS)
    else:
        optimiser = torch.optim.SGD(tensors, lr=spec["lr"])
    dropouts, n = spec["dropouts"], len(weights)
    functional = torch.nn.functional

    def step(batch):
        x = torch.from_numpy(batch["inputs"]).reshape(len(batch["inputs"]), -1)
        labels = torch.from_numpy(batch["targets"])
        for i in range(n):
            if dropouts[i]:
                x = functional.dropout(x, dropouts[i], training=True)
            x = torch.addmm(biases[i], x, weights[i])
            if i < n - 1:
                x = torch.relu(x)
            elif spec.get("output") == "sigmoid":
                x = torch.sigmoid(x)
        loss = functional.cross_entropy(x, labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        return loss.item()

    return step


def jax_training(spec, params):
    """The whole JAX step (forward, grad, update) under one jit, and its state (weights, squares, key): the CPU
    and GPU benchmarks both time it. The step returns the loss without waiting for it."""
    import jax
    import jax.numpy as jnp

    dropouts, lr, n = spec["dropouts"], spec["lr"], len(params)
    adagrad = spec["optimiser"] == "adagrad"

    def loss_fn(weights, x, labels, key):
        keys = jax.random.split(key, n)
        for i, (w, b) in enumerate(weights):
            if dropouts[i]:
                keep = 1.0 - dropouts[i]
                x = jnp.where(jax.random.bernoulli(keys[i], keep, x.shape), x / keep, 0.0)
            x = x @ w + b
            if i < n - 1:
                x = jax.nn.relu(x)
            elif spec.get("output") == "sigmoid":
                x = jax.nn.sigmoid(x)
        logp = jax.nn.log_softmax(x)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    @jax.jit
    def train_step(weights, squares, x, labels, key):
        key, sub = jax.random.split(key)
        loss, grads = jax.value_and_grad(loss_fn)(weights, x.reshape(x.shape[0], -1), labels, sub)
        if adagrad:
            squares = jax.tree_util.tree_map(lambda s, g: s + g * g, squares, grads)
            weights = jax.tree_util.tree_map(
                lambda w, g, s: w - lr * g / (jnp.sqrt(s) + ADAGRAD_EPS), weights, grads, squares
            )
        else:
            weights = jax.tree_util.tree_map(lambda w, g: w - lr * g, weights, grads)
        return weights, squares, key, loss

    state = {
        "weights": [(jnp.asarray(w), jnp.asarray(b)) for w, b in params],
        "key": jax.random.PRNGKey(0),
    }
    state["squares"] = jax.tree_util.tree_map(jnp.zeros_like, state["weights"])

    def step(batch):
        state["weights"], state["squares"], state["key"], loss = train_step(
            state["weights"], state["squares"], batch["inputs"], batch["targets"], state["key"]
        )
        return loss

    return step, state


def jax_step(spec, params):
    """JAX with the whole step under one jit (:func:`jax_training`); None if jax is not importable."""
    if importlib.util.find_spec("jax") is None:
        return None
    step, _ = jax_training(spec, params)
    return lambda batch: float(step(batch))  # waits for the result


# -- timing ----------------------------------------------------------------------------------------
def time_round(step, batches, start, iterations):
    """Per-iteration wall times (s) of ``iterations`` steps, after a garbage collection."""
    gc.collect()
    times = []
    for i in range(iterations):
        batch = batches[(start + i) % len(batches)]
        t0 = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - t0)
    return times


def sigma_handlers(names=None) -> list[str]:
    """Installed handlers that can run here (or the ones asked for), best-ranked first."""
    from sigma_core import available_handlers, handler_availability

    if names:
        return [name for name in names if handler_availability(name)[0]]
    return available_handlers()


def system_names(handlers) -> list[str]:
    """Every system to measure; third-party ones only when importable (looked up, not imported)."""
    import importlib.util

    names = [f"sigma-{name}" for name in handlers] + [f"sigma-{handlers[0]}-unrecorded", "numpy-loop", "gemms-only"]
    if "cpu" in handlers and mkl_installed():  # the cpu handler on each provider, each against its own GEMMs
        names[names.index("sigma-cpu") + 1:names.index("sigma-cpu") + 1] = ["sigma-cpu-openblas"]
        names.append("gemms-only-mkl")
    names += [name for name, module in (("pytorch-eager", "torch"), ("jax-jit", "jax")) if importlib.util.find_spec(module)]
    return names


def extra_workloads() -> dict:
    """Workloads other distributions add, by name: the entry points of the group ``sigmann_bench.workloads``
    (sigmann-vision's ``cnn``), each naming an object with ``batch`` (records per step), ``systems(handlers)``
    (the system names to time, ours first), ``make_step(system)`` -> step(batch) and ``make_batches()``. They
    run as the built-in ones do: every system in its own process, rounds alternating."""
    from importlib.metadata import entry_points

    return {point.name: point for point in entry_points(group="sigmann_bench.workloads")}


def _extra(workload):
    return extra_workloads()[workload].load()


def _batch(workload) -> int:
    return WORKLOADS[workload].get("batch", BATCH) if workload in WORKLOADS else _extra(workload).batch


def make_step(workload, system):
    """step(batch) for one system on one workload; every system starts from the same parameters."""
    if workload not in WORKLOADS:
        return _extra(workload).make_step(system)
    spec = dict(WORKLOADS[workload], name=workload)
    reference = build_trainer(spec, "numpy")  # seeded: the same initial parameters in every process
    if system == "sigma-cpu-openblas":
        os.environ["SIGMA_CPU_BLAS"] = "openblas"  # this worker's process only
        return build_trainer(spec, "cpu").run_iteration
    if system.startswith("sigma-"):
        handler = system.removeprefix("sigma-").removesuffix("-unrecorded")
        return build_trainer(spec, handler, replay=not system.endswith("-unrecorded")).run_iteration
    if system == "numpy-loop":
        hand = build_hand(spec, reference)
        return lambda batch: hand.step(batch["inputs"], batch["targets"])
    if system.startswith("gemms-only"):
        provider = "mkl" if system == "gemms-only-mkl" else "numpy"
        gemms = GemmsOnly(dense_parameters(reference), spec.get("batch", BATCH), provider)
        return lambda batch: gemms.step(batch["inputs"], batch["targets"])
    return {"pytorch-eager": torch_step, "jax-jit": jax_step}[system](spec, dense_parameters(reference))


def _worker(connection, workload, system):
    """One system in its own process: runs the rounds it is sent, returns per-iteration times."""
    step = make_step(workload, system)
    batches = make_batches(batch=_batch(workload)) if workload in WORKLOADS else _extra(workload).make_batches()
    connection.send("ready")
    while (message := connection.recv()) is not None:
        start, iterations = message
        connection.send(time_round(step, batches, start, iterations))


#: Pause between two systems' rounds: thread pools (OpenMP, BLAS, XLA) spin-wait
#: for a while after their last task, and on a small machine a pool still
#: spinning would steal the cores the next system's round needs.
SETTLE_S = 0.2


def bench_workload(name, handlers, rounds, iterations, warmup):
    """Alternating rounds over every system, each in its own process.

    Separate processes keep each system's thread pools from competing with
    another's (PyTorch's OpenMP threads and OpenBLAS's, together on two cores,
    slow both down many times over), while the rounds still alternate.
    """
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    systems = system_names(handlers) if name in WORKLOADS else _extra(name).systems(handlers)
    workers = {}
    try:
        for system in systems:
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker, args=(theirs, name, system), daemon=True)
            process.start()
            workers[system] = (process, ours)
        for _, connection in workers.values():
            connection.recv()

        def round_of(system, start, count):
            time.sleep(SETTLE_S)
            connection = workers[system][1]
            connection.send((start, count))
            return connection.recv()

        for system in systems:
            round_of(system, 0, warmup)
        samples = {s: [] for s in systems}
        round_medians = {s: [] for s in systems}
        for r in range(rounds):
            for system in systems:
                times = round_of(system, r * iterations, iterations)
                samples[system].extend(times)
                round_medians[system].append(statistics.median(times))
    finally:
        for process, connection in workers.values():
            connection.send(None)
            process.join(timeout=10)
    ours = statistics.median(samples[systems[0]])
    records = []
    for system in systems:
        median = statistics.median(samples[system])
        records.append({
            "workload": name,
            "system": system,
            "measure": "iteration",
            "median_ms": round(median * 1e3, 4),
            "min_ms": round(min(round_medians[system]) * 1e3, 4),
            "max_ms": round(max(round_medians[system]) * 1e3, 4),
            "samples_per_s": round(_batch(name) / median, 1),
            "ratio_to_ours": round(median / ours, 3),
            "iterations": len(samples[system]),
        })
    return records


FIRST_ITERATION = """
import sys, time
t0 = time.perf_counter()
from sigmann_bench.bench import WORKLOADS, build_trainer, make_batches
trainer = build_trainer(dict(WORKLOADS[sys.argv[1]], name=sys.argv[1]), sys.argv[2])
trainer.run_iteration(make_batches(n=1)[0])
print(time.perf_counter() - t0)
"""


def first_iteration_latency(workload, handler="cpu") -> list[dict]:
    """Seconds from a fresh process's first import to the end of its first iteration.

    Run twice against one new, empty numba cache directory: the first run
    compiles every kernel it needs (cold), the second loads them from disk (warm).
    """
    from sigmann_bench.startup import settle

    records = []
    with tempfile.TemporaryDirectory(prefix="sigma-numba-cache-") as cache:
        env = dict(os.environ, SIGMA_NUMBA_CACHE_DIR=cache)
        for measure in ("first-iteration-cold-cache", "first-iteration-warm-cache"):
            result = subprocess.run(
                [sys.executable, "-c", FIRST_ITERATION, workload, handler],
                env=env, capture_output=True, text=True, check=True,
            )
            settle(handler, cache)
            ms = round(float(result.stdout.split()[-1]) * 1e3, 1)
            records.append({"workload": workload, "system": f"sigma-{handler}", "measure": measure,
                            "median_ms": ms, "min_ms": ms, "max_ms": ms})
    return records


def machine() -> str:
    """CPUs, CPU model, NumPy and its BLAS: the context every number here needs."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older NumPy: no dict mode
        blas = "unknown BLAS"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return f"{usable} usable CPUs ({model}), numpy {np.__version__}, BLAS {blas}"


def run(handlers=None, workloads=None, quick=False, first_iteration=True, log=None) -> list[dict]:
    """Every measurement as JSON-ready records (see the module docstring); progress goes to ``log`` (stderr)."""
    log = log or sys.stderr  # looked up per call: a default bound at import would keep a replaced stderr
    from sigma_core import SigmaError

    known = [*WORKLOADS, "startup", *extra_workloads()]
    unknown = sorted(set(workloads or ()) - set(known))
    if unknown:
        raise SigmaError(f"sigma bench: unknown workload(s) {', '.join(unknown)} (choose from {', '.join(known)})")
    handlers = sigma_handlers(handlers)
    if not handlers:
        raise SigmaError("sigma bench: none of the requested handlers can run here")
    records = []
    if "cuda" in handlers:  # timed apart, against GPU baselines: see sigmann_bench.gpu
        from sigmann_bench import gpu

        records, handlers = gpu.run(workloads, quick, log), [h for h in handlers if h != "cuda"]
        if not handlers:
            return records
    rounds, iterations, warmup = QUICK if quick else FULL
    print(f"sigma bench: {machine()}; handlers {', '.join(handlers)}; "
          f"{rounds} rounds x {iterations} timed iterations per system", file=log)
    for name in workloads or DEFAULT_WORKLOADS:
        if name == "startup":  # whole processes, not steps: see sigmann_bench.startup
            from sigmann_bench import startup

            records += startup.run(handlers, rounds, log)
        else:
            records += bench_workload(name, handlers, rounds, iterations, warmup)
        print(f"sigma bench: {name} done", file=log)
    if first_iteration and "cpu" in handlers:
        for name in workloads or DEFAULT_WORKLOADS:
            if name in WORKLOADS:
                records += first_iteration_latency(name)
    return records


def format_table(records) -> str:
    lines = [f"{'workload':<11}{'system':<22}{'median ms':>10}{'rounds min-max':>18}{'samples/s':>11}{'vs ours':>9}"]
    if all(r["measure"] != "iteration" for r in records):
        lines = []
    for r in records:
        if r["measure"] == "iteration":
            spread = f"{r['min_ms']:.3f}-{r['max_ms']:.3f}"
            lines.append(f"{r['workload']:<11}{r['system']:<22}{r['median_ms']:>10.3f}{spread:>18}"
                         f"{r['samples_per_s']:>11.0f}{r['ratio_to_ours']:>8.2f}x")
    for r in records:
        if r["measure"] == "process":
            added = f", {r['added_to_warm_ms'] / 1e3:+.2f} s on the warm cache" if "added_to_warm_ms" in r else ""
            lines.append(f"{r['workload']:<11}{r['system']:<22}whole process: {r['median_ms'] / 1e3:.2f} s "
                         f"({r['min_ms'] / 1e3:.2f}-{r['max_ms'] / 1e3:.2f}), "
                         f"{r['ratio_to_numpy']:.2f}x sigma-numpy{added}"
                         + ("" if r["bytecode_cache"] else " (PYTHONDONTWRITEBYTECODE is set: every process compiles "
                                                           "the modules it imports that have no bytecode cache)"))
        elif r["measure"] != "iteration":
            lines.append(f"{r['workload']:<11}{r['system']:<22}{r['measure']}: {r['median_ms']:.0f} ms")
    return "\n".join(lines)


def main(args) -> int:
    """The ``sigma bench`` command (see :mod:`sigmann_bench`)."""
    records = run(args.handlers, args.workloads, args.quick)
    print(json.dumps(records, indent=2) if args.json else format_table(records))
    return 0

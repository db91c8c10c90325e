"""``sigma bench --handlers cuda``: the CUDA handler against PyTorch and JAX on the same GPU, same run.

Workloads (float32, the networks of :mod:`sigmann_bench.bench`): ``sigma-mlp``
and ``small-mlp`` at batch 100 (latency: launch and Python overhead weigh most),
and ``sigma-mlp-4k``, Sigma's MNIST network at batch 4096 (throughput: the
GEMMs should dominate). Systems, each in its own process:

* ``sigma-cuda``: the real framework path (Network, Trainer.run_iteration) on pinned host batches, recorded
  steps replayed as CUDA graphs as ``sigma train`` does (:mod:`sigma_cuda.graphs`);
* ``sigma-cuda-unrecorded``: the same with replay off, every step dispatched op by op;
* ``gemms-only``: the step's matrix products alone, cuBLAS (through CuPy) into preallocated outputs;
* ``pytorch-eager``: the same network and optimiser, batches from pinned memory (``non_blocking``);
* ``pytorch-graph``: the whole step (forward, backward, update) captured once as a CUDA graph, replayed;
* ``jax-jit``: the whole step under one ``jit``.

Third-party systems run only when importable. Timing: device work is
asynchronous, so a round is ``iterations`` steps between two device
synchronisations, and its time per iteration is the round's time over
``iterations``; rounds alternate between the systems (as on the CPU) and the
median round is reported, with the min-max of rounds, samples/s, the ratio to
``sigma-cuda`` and to ``gemms-only``. The first iteration in a fresh process is
timed with CuPy's kernel cache empty (NVRTC compiles) and then warm.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from sigmann_bench.bench import ADAGRAD_EPS, DTYPE, SETTLE_S, WORKLOADS, build_trainer, dense_parameters, jax_training

#: name -> (network spec of bench.WORKLOADS, batch size)
GPU_WORKLOADS = {"sigma-mlp": ("sigma-mlp", 100), "small-mlp": ("small-mlp", 100), "sigma-mlp-4k": ("sigma-mlp", 4096)}
N_BATCHES = 8
#: (rounds, iterations per round, warm-up iterations) by batch size
FULL = {100: (7, 200, 50), 4096: (7, 40, 10)}
QUICK = {100: (2, 20, 5), 4096: (2, 5, 2)}


def make_batches(batch, seed=1234, n=N_BATCHES):
    rng = np.random.default_rng(seed)
    return [{"inputs": rng.random((batch, 28, 28), dtype=DTYPE), "targets": rng.integers(0, 10, size=batch, dtype=np.int64)}
            for _ in range(n)]


# -- systems: each returns (step(batch), sync()) ------------------------------------------------------
def sigma_system(spec, params, batch, replay=True):
    """Batches pinned once, as the prefetching iterator's pin_batch does (and PyTorch's below); ``params`` is not
    needed: the handler draws the reference's initial parameters from the same seed."""
    import cupy

    trainer, pinned = build_trainer(spec, "cuda", replay=replay), {}

    def step(host):
        return trainer.run_iteration(pinned.setdefault(id(host), trainer.handler.pin_batch(host)))

    return step, cupy.cuda.Device().synchronize


def gemms_system(spec, params, batch):
    import cupy

    weights = [cupy.asarray(w) for w, _ in params]
    xs = [cupy.ones((batch, w.shape[0]), DTYPE) for w in weights]
    hs = [cupy.empty((batch, w.shape[1]), DTYPE) for w in weights]
    gws = [cupy.empty_like(w) for w in weights]
    dxs = [cupy.empty_like(x) for x in xs]

    def step(_):
        for x, w, h in zip(xs, weights, hs):
            cupy.matmul(x, w, out=h)
        for i in range(len(weights) - 1, -1, -1):
            cupy.matmul(xs[i].T, hs[i], out=gws[i])
            if i:
                cupy.matmul(hs[i], weights[i].T, out=dxs[i])

    return step, cupy.cuda.Device().synchronize


def _torch_model(spec, params):
    import torch

    weights = [torch.tensor(w, device="cuda", requires_grad=True) for w, _ in params]
    biases = [torch.tensor(b, device="cuda", requires_grad=True) for _, b in params]
    functional, n = torch.nn.functional, len(weights)

    def loss(x, labels):
        for i in range(n):
            if spec["dropouts"][i]:
                x = functional.dropout(x, spec["dropouts"][i], training=True)
            x = torch.addmm(biases[i], x, weights[i])
            x = torch.relu(x) if i < n - 1 else torch.sigmoid(x) if spec.get("output") == "sigmoid" else x
        return functional.cross_entropy(x, labels)

    return weights + biases, loss


def _pinned(batch):
    import torch

    return (torch.from_numpy(batch["inputs"]).reshape(len(batch["targets"]), -1).pin_memory(),
            torch.from_numpy(batch["targets"]).pin_memory())


def torch_eager_system(spec, params, batch):
    import torch

    tensors, loss = _torch_model(spec, params)
    optimiser = (torch.optim.Adagrad(tensors, lr=spec["lr"], eps=ADAGRAD_EPS) if spec["optimiser"] == "adagrad"
                 else torch.optim.SGD(tensors, lr=spec["lr"]))
    pinned = {}

    def step(host):
        x, labels = pinned.setdefault(id(host), _pinned(host))
        cost = loss(x.cuda(non_blocking=True), labels.cuda(non_blocking=True))
        optimiser.zero_grad(set_to_none=True)
        cost.backward()
        optimiser.step()

    return step, torch.cuda.synchronize


def torch_graph_system(spec, params, batch):
    """The whole training step as one CUDA graph (PyTorch's "whole network capture"), update written out."""
    import torch

    tensors, loss = _torch_model(spec, params)
    squares = [torch.zeros_like(t) for t in tensors]
    static_x = torch.zeros((batch, 784), device="cuda")
    static_labels = torch.zeros((batch,), dtype=torch.int64, device="cuda")

    def body():
        grads = torch.autograd.grad(loss(static_x, static_labels), tensors)
        with torch.no_grad():
            for t, g, s in zip(tensors, grads, squares):
                if spec["optimiser"] == "adagrad":
                    s.addcmul_(g, g)
                    t.addcdiv_(g, s.sqrt().add_(ADAGRAD_EPS), value=-spec["lr"])
                else:
                    t.add_(g, alpha=-spec["lr"])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    pinned = {}

    def step(host):
        x, labels = pinned.setdefault(id(host), _pinned(host))
        static_x.copy_(x, non_blocking=True)
        static_labels.copy_(labels, non_blocking=True)
        graph.replay()

    return step, torch.cuda.synchronize


def jax_system(spec, params, batch):
    import jax

    step, state = jax_training(spec, params)
    return step, lambda: jax.block_until_ready(state["weights"])


SYSTEMS = {"sigma-cuda": (None, sigma_system), "sigma-cuda-unrecorded": ("cupy", functools.partial(sigma_system, replay=False)),
           "gemms-only": ("cupy", gemms_system),
           "pytorch-eager": ("torch", torch_eager_system), "pytorch-graph": ("torch", torch_graph_system),
           "jax-jit": ("jax", jax_system)}


def system_names() -> list[str]:
    return [name for name, (module, _) in SYSTEMS.items() if module is None or importlib.util.find_spec(module)]


# -- timing ---------------------------------------------------------------------------------------------------
def _worker(connection, workload, system):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX must leave memory to the others
    spec_name, batch = GPU_WORKLOADS[workload]
    spec = dict(WORKLOADS[spec_name], name=workload)
    params = dense_parameters(build_trainer(spec, "numpy"))  # seeded: the same start everywhere
    step, sync = SYSTEMS[system][1](spec, params, batch)
    batches = make_batches(batch)
    connection.send("ready")
    while (message := connection.recv()) is not None:
        start, iterations = message
        sync()
        t0 = time.perf_counter()
        for i in range(iterations):
            step(batches[(start + i) % len(batches)])
        sync()
        connection.send((time.perf_counter() - t0) / iterations)


def bench_workload(workload, rounds, iterations, warmup, log) -> list[dict]:
    import multiprocessing

    context, systems, workers = multiprocessing.get_context("spawn"), system_names(), {}
    try:
        for system in systems:
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker, args=(theirs, workload, system), daemon=True)
            process.start()
            workers[system] = (process, ours)
        for system in systems:
            if workers[system][1].recv() != "ready":
                raise RuntimeError(f"{system} did not start")

        def round_of(system, start, count):
            time.sleep(SETTLE_S)
            workers[system][1].send((start, count))
            return workers[system][1].recv()

        for system in systems:
            round_of(system, 0, warmup)
        per_round = {s: [] for s in systems}
        for r in range(rounds):
            for system in systems:
                per_round[system].append(round_of(system, r * iterations, iterations))
    finally:
        for process, connection in workers.values():
            connection.send(None)
            process.join(timeout=30)
    batch = GPU_WORKLOADS[workload][1]
    medians = {s: statistics.median(times) for s, times in per_round.items()}
    records = [{"workload": workload, "system": s, "measure": "iteration", "batch": batch,
                "median_ms": round(medians[s] * 1e3, 4), "min_ms": round(min(t) * 1e3, 4), "max_ms": round(max(t) * 1e3, 4),
                "samples_per_s": round(batch / medians[s], 1), "ratio_to_ours": round(medians[s] / medians["sigma-cuda"], 3),
                "ratio_to_gemms": round(medians[s] / medians["gemms-only"], 3) if "gemms-only" in medians else None,
                "iterations": rounds * iterations} for s, t in per_round.items()]
    print(f"sigma bench: {workload} done", file=log)
    return records


FIRST_ITERATION = """
import sys, time
t0 = time.perf_counter()
from sigmann_bench.bench import WORKLOADS, build_trainer
from sigmann_bench.gpu import make_batches
import cupy
trainer = build_trainer(dict(WORKLOADS["sigma-mlp"], name="sigma-mlp"), "cuda")
trainer.run_iteration(make_batches(100, n=1)[0])
cupy.cuda.Device().synchronize()
print(time.perf_counter() - t0)
"""


def first_iteration_latency() -> list[dict]:
    """Seconds from a fresh process's first import to its first finished iteration: cold, then warm kernel cache."""
    records = []
    with tempfile.TemporaryDirectory(prefix="sigma-cupy-cache-") as cache:
        for measure in ("first-iteration-cold-cache", "first-iteration-warm-cache"):
            result = subprocess.run([sys.executable, "-c", FIRST_ITERATION], env=dict(os.environ, CUPY_CACHE_DIR=cache),
                                    capture_output=True, text=True, check=True)
            ms = round(float(result.stdout.split()[-1]) * 1e3, 1)
            records.append({"workload": "sigma-mlp", "system": "sigma-cuda", "measure": measure,
                            "median_ms": ms, "min_ms": ms, "max_ms": ms})
    return records


def device_name() -> str:
    from sigma_cuda import devices

    probe = devices.probe_driver()
    return f"{devices.describe(probe.devices)}, driver CUDA {devices.version_text(probe.driver_version)}"


def run(workloads=None, quick=False, log=sys.stderr) -> list[dict]:
    """Every GPU measurement as JSON-ready records (see the module docstring)."""
    from sigma_core import SigmaError

    names = [w for w in GPU_WORKLOADS if not workloads or w in workloads or GPU_WORKLOADS[w][0] in workloads]
    if not names:
        raise SigmaError(f"sigma bench: no GPU workload among {', '.join(workloads)} (choose from {', '.join(GPU_WORKLOADS)})")
    print(f"sigma bench: GPU {device_name()}; systems {', '.join(system_names())}", file=log)
    records = []
    for name in names:
        rounds, iterations, warmup = (QUICK if quick else FULL)[GPU_WORKLOADS[name][1]]
        records += bench_workload(name, rounds, iterations, warmup, log)
    return records + first_iteration_latency()

"""Data-parallel operators on one machine: single worker vs ``threads`` x2 vs ``ray`` x2.

Workload: Sigma's MNIST MLP (examples/mnist.toml: 784 -> Dropout 0.2 -> Dense
1000 relu -> Dropout 0.4 -> Dense 800 relu -> Dropout 0.4 -> Dense 10 ->
softmax cross-entropy, Adagrad lr 0.02, float32), global batch 200, trained
on the real MNIST test set (the first 8,000 images; pass ``--data`` to the
directory holding t10k-*-idx?-ubyte.gz).

Each configuration trains through the product's own path (``build_run``,
``[operator]``) with a hook timing every global iteration; the first
``--warmup`` iterations of a run (actor start, numba compilation, caches)
are not counted. Rounds alternate between configurations, so drift in the
machine's load hits them alike, and each configuration's best round is
reported (the machine may be shared: the best round is the least disturbed).

Reported per configuration: iterations/s, and the communication share of a
step: 1 - (compute + update) / step, where compute is the slowest worker's
forward and backward pass (``Trainer.gradients``) and update the optimiser
step on the global state (``Trainer.apply_gradients``, or for the single
worker its share of ``run_iteration``); the rest is moving parameters and
gradients, reducing, and waiting for the slower worker.

BLAS threads: single worker with 1 and with 2 (the machine's default);
``threads`` x2 and ``ray`` x2 with one each (``blas_threads = 1``).

``--reduce`` instead times only the ways two Ray actors can combine a
gradient of this size (no training), per global step: the ``ray``
operator's all-gather in a compiled graph (``ray.dag``: each actor hands
out its gradient through a shared-memory channel and adds both; the driver
adds them too), its second version (the same all-gather as ordinary actor
calls through the object store), its first version (the driver
``ray.put``s the parameters, worker 1's gradient goes to worker 0, which
adds it to its own and returns the sum to the driver), and Ray's collective
all-reduce with the gloo backend (needs torch).

``--products`` times the matrix products alone: one worker's on 200 records
with 2 BLAS threads against two threads' on 100 records each with one (the
floor under ``threads`` x2 against a single worker using both cores).

``--compute`` times what the scaling model in BENCHMARKS.md needs from one
machine, on one BLAS thread: a worker's forward and backward pass on 200,
100, 25 and 3 records (a share of the global batch of 200 on 1, 2, 8 and 64
workers), adding one more worker's gradient, and the optimiser step; then it
prints the model's step times (``--overhead``: Ray's own cost per step).

Usage: ``python benchmarks/operators.py [--rounds 5] [--iterations 30] [--handler cpu] [--json out.json]``,
``python benchmarks/operators.py --reduce``, ``--products``, ``--compute``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
import tomllib
from pathlib import Path

import numpy as np

from sigma_core import Loop, operator_from_config
from sigma_core import config as run_config
from sigma_core.hooks import Hook
from sigma_core.run import build_run
from sigma_core.training.trainer import Trainer
from sigmann_threads import blas_threads

ROOT = Path(__file__).resolve().parent.parent
LINK_BYTES_PER_SECOND = 10e9 / 8  # 10 Gbit/s


class Timer:
    """Per-thread durations of Trainer.gradients and Trainer.apply_gradients calls, in call order."""

    def __init__(self):
        self.gradients, self.updates, self._lock = {}, [], threading.Lock()
        gradients, apply = Trainer.gradients, Trainer.apply_gradients

        def timed_gradients(trainer, batch):
            began = time.perf_counter()
            try:
                return gradients(trainer, batch)
            finally:
                with self._lock:
                    self.gradients.setdefault(threading.get_ident(), []).append(time.perf_counter() - began)

        def timed_apply(trainer, grads, cost):
            began = time.perf_counter()
            try:
                return apply(trainer, grads, cost)
            finally:
                self.updates.append(time.perf_counter() - began)

        Trainer.gradients, Trainer.apply_gradients = timed_gradients, timed_apply

    def reset(self):
        self.gradients, self.updates = {}, []


class Steps(Hook):
    """Timestamps of every global iteration of a run, and the ``ray`` workers' computing time so far."""

    def __init__(self):
        self.times, self.busy = [], []

    def on_iteration(self):
        self.times.append(time.perf_counter())
        self.busy.append(getattr(self.run.loop.operator, "busy_seconds", 0.0))


class StopAfter(Hook):
    def __init__(self, count):
        self.every = count

    def on_iteration(self):
        self.run.command("stop")


def mnist_config(data: Path, handler: str, operator: dict) -> dict:
    raw = tomllib.loads((ROOT / "examples" / "mnist.toml").read_text())
    raw["data"]["directory"] = str(data)
    raw["handler"] = {"name": handler, "dtype": "float32"}
    raw["training"].update(batch_size=200, epochs=10_000)
    raw["operator"] = operator
    return run_config.validate(raw)


CONFIGURATIONS = {
    "single, 1 BLAS thread": ({"type": "single_worker"}, 1),
    "single, 2 BLAS threads": ({"type": "single_worker"}, 0),
    "threads x2": ({"type": "threads", "workers": 2, "blas_threads": 1}, 0),
    "ray x2": ({"type": "ray", "workers": 2, "blas_threads": 1}, 0),
}


def one_round(run, operator, blas: int, iterations: int, warmup: int, timer: Timer) -> dict:
    """Train ``warmup + iterations`` global iterations; the step time and shares of the counted ones."""
    steps = Steps()
    loop = Loop(run.trainer, operator_from_config(run.trainer, operator), epochs=10_000,
                hooks=[steps, StopAfter(warmup + iterations)], config=run.config)
    timer.reset()
    with blas_threads(blas):
        loop.run()
    counted = np.diff(steps.times[warmup - 1:])
    step = float(np.median(counted))
    update = float(np.median(timer.updates[-iterations:])) if timer.updates else 0.0
    if operator["type"] == "single_worker":
        update, compute = 0.0, step  # one worker: everything is its own work, nothing is communication
    elif operator["type"] == "ray":
        compute = (steps.busy[-1] - steps.busy[warmup - 1]) / iterations  # the workers time themselves
    else:
        per_thread = [durations[-iterations:] for durations in timer.gradients.values()]
        compute = float(np.median(np.max(per_thread, axis=0)))
    return {"step_ms": step * 1e3, "compute_ms": compute * 1e3, "update_ms": update * 1e3,
            "communication": max(0.0, 1 - (compute + update) / step)}


def reduce_patterns(parameters: int, repeats: int = 40) -> dict:
    """Best time (ms) of each way to combine two actors' float32 gradients of ``parameters`` elements, as one
    global step would (the driver starts it with one call per actor and waits for the result it needs)."""
    import ray

    @ray.remote(num_cpus=1)
    class Holder:
        def __init__(self):
            self.grad, self.total = np.ones(parameters, np.float32), np.empty(parameters, np.float32)

        def gather(self, *previous):  # the first lockstep version: add every worker's last result, hand out a new one
            if previous:
                np.copyto(self.total, previous[0])
                for other in previous[1:]:
                    self.total += other
            return self.grad

        def compute(self, order):  # the operator: one compiled-graph execution per step, compute ...
            return self.grad

        def add(self, *results):  # ... then gather: add every worker's result
            np.copyto(self.total, results[0])
            for other in results[1:]:
                self.total += other

        def load_and_add(self, parameters_, *children):  # the earlier operator: broadcast in, reduce tree out
            np.copyto(self.total, parameters_)
            return sum(children, self.grad.copy())

        def join(self, rank):
            import ray.util.collective as collective

            collective.init_collective_group(2, rank, backend="gloo", group_name="bench")

        def allreduce(self):
            import torch
            import ray.util.collective as collective

            collective.allreduce(torch.from_numpy(self.grad), group_name="bench")
            self.grad.fill(1.0)

    actors, total, pending = [Holder.remote() for _ in range(2)], np.empty(parameters, np.float32), []

    def all_gather():
        nonlocal pending
        refs = [actor.gather.remote(*pending) for actor in actors]
        np.add(*ray.get(refs), out=total)
        pending = refs

    from ray.dag import InputNode, MultiOutputNode

    with InputNode() as order:
        results = [actor.compute.bind(order) for actor in actors]
        graph = MultiOutputNode(results + [actor.add.bind(*results) for actor in actors])
    graph = graph.experimental_compile(_buffer_size_bytes=parameters * 4 + (1 << 16))

    def compiled_graph():
        outputs = [ref.get(timeout=-1) for ref in graph.execute(0)]
        np.add(*outputs[:2], out=total)

    def tree():
        put = ray.put(total)
        np.copyto(total, ray.get(actors[0].load_and_add.remote(put, actors[1].load_and_add.remote(put))))

    patterns = {"all-gather in a compiled graph (the ray operator)": compiled_graph,
                "all-gather through the object store (its second version)": all_gather,
                "driver broadcast + reduce tree to the driver (its first version)": tree}
    try:
        ray.get([actor.join.remote(rank) for rank, actor in enumerate(actors)])
        patterns["gloo all-reduce (ray.util.collective, torch.distributed)"] = lambda: ray.get(
            [actor.allreduce.remote() for actor in actors])
    except Exception as error:  # no torch: Ray's CPU collectives need it
        print(f"  (gloo not measured: {type(error).__name__}: {str(error).splitlines()[0]})")
    best = {name: float("inf") for name in patterns}
    for _ in range(repeats):
        for name, pattern in patterns.items():
            began = time.perf_counter()
            pattern()
            best[name] = min(best[name], time.perf_counter() - began)
    graph.teardown()
    for actor in actors:
        ray.kill(actor)
    return {name: seconds * 1e3 for name, seconds in best.items()}


def product_floor(repeats: int = 20) -> dict:
    """ms per step of the MNIST MLP's matrix products alone (forward, weight gradients, input gradients) with
    NumPy: one product set on 200 records with 2 BLAS threads (one worker using both cores), against two Python
    threads each running the set on 100 records with 1 BLAS thread (``threads`` x2), each with its own weights."""
    rng = np.random.default_rng(0)

    def products(records: int):
        x = rng.standard_normal((records, 784), dtype=np.float32)
        w1, w2, w3 = (rng.standard_normal(shape, dtype=np.float32) for shape in ((784, 1000), (1000, 800), (800, 10)))

        def step():
            for _ in range(repeats):
                h1 = x @ w1
                h2 = h1 @ w2
                out = h2 @ w3
                h2.T @ out, h1.T @ h2, x.T @ h1, out @ w3.T, h2 @ w2.T
        return step

    times = {}
    with blas_threads(2):
        one = products(200)
        one()
        began = time.perf_counter()
        one()
        times["one worker, 200 records, 2 BLAS threads"] = (time.perf_counter() - began) / repeats * 1e3
    with blas_threads(1):
        pair = [products(100), products(100)]
        for step in pair:
            step()
        threads = [threading.Thread(target=step) for step in pair]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        times["two threads, 100 records each, 1 BLAS thread each"] = (time.perf_counter() - began) / repeats * 1e3
    return times


def compute_times(data: Path, handler: str, repeats: int = 30) -> dict:
    """Best time (ms), one BLAS thread, of what a worker does per step: its forward and backward pass per shard
    size, adding one more worker's flat gradient to the sum, and the optimiser step."""
    run = build_run(mnist_config(data, handler, {}))
    trainer = run.trainer
    trainer.initialise(run.handler)
    batch = next(iter(trainer.training_iterator))
    zeros = {pid: np.zeros(array.shape, np.float32) for pid, array in trainer.network.parameters.items()}
    flat, total = np.ones(trainer.network.parameter_count, np.float32), np.zeros(trainer.network.parameter_count,
                                                                                 np.float32)

    def best(work) -> float:
        fastest = float("inf")
        for _ in range(repeats):
            began = time.perf_counter()
            work()
            fastest = min(fastest, time.perf_counter() - began)
        return fastest * 1e3

    def pass_of(shard):
        with trainer.handler.session():
            trainer.gradients(shard)

    times = {}
    with blas_threads(1):
        for records in (200, 100, 25, 3):
            shard = {key: values[:records] for key, values in batch.items()}
            times[f"gradients, {records} records"] = best(lambda: pass_of(shard))
        times["add one gradient"] = best(lambda: np.add(total, flat, out=total))
        times["optimiser step"] = best(lambda: trainer.apply_gradients(zeros, 0.0))
    return times


def scaling_model(compute: dict, overhead_ms: float, parameters: int = 1_593_810) -> list[dict]:
    """Step time on N machines at 10 Gbit/s, one worker each (see BENCHMARKS.md): the ``ray`` operator as built
    (an all-gather in a compiled graph) and with a ring all-reduce among the workers, for comparison."""
    link = parameters * 4 / LINK_BYTES_PER_SECOND * 1e3  # ms to move the parameters (or gradients) once
    rows = []
    for machines, records in ((1, 200), (2, 100), (8, 25), (64, 3)):
        worker = compute[f"gradients, {records} records"] + compute["optimiser step"]
        gathered = worker + (machines - 1) * compute["add one gradient"] + machines * link + overhead_ms
        ring = worker + 2 * (machines - 1) / machines * link + 2 * (machines - 1) * 0.05 + overhead_ms
        rows.append({"machines": machines, "records": records, "operator_ms": gathered if machines > 1 else worker,
                     "ring_ms": ring if machines > 1 else worker})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/work/shared/data/mnist", help="directory with the MNIST IDX files")
    parser.add_argument("--handler", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--only", action="append", choices=sorted(CONFIGURATIONS))
    parser.add_argument("--json", metavar="OUT.json")
    parser.add_argument("--reduce", action="store_true", help="time only the ways to combine two Ray workers' gradients")
    parser.add_argument("--compute", action="store_true", help="time one worker's pass per shard size, for the model")
    parser.add_argument("--products", action="store_true", help="time only the matrix products, one worker vs two")
    parser.add_argument("--overhead", type=float, default=5.0, help="Ray's fixed cost per step in the model, ms")
    args = parser.parse_args()
    if args.compute:
        print(f"one worker, one BLAS thread, handler {args.handler}, best of 30; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}")
        times = compute_times(Path(args.data), args.handler)
        for name, ms in times.items():
            print(f"  {name:<28} {ms:6.2f} ms")
        print(f"step time at 10 Gbit/s (model in BENCHMARKS.md; Ray overhead {args.overhead:g} ms per step):")
        for row in scaling_model(times, args.overhead):
            print(f"  {row['machines']:>2} machines, {row['records']:>3} records each: the ray operator "
                  f"{row['operator_ms']:6.1f} ms, with a ring all-reduce {row['ring_ms']:5.1f} ms")
        return 0
    if args.products:
        print(f"the MNIST MLP's matrix products per step, NumPy, 3 runs; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}")
        for _ in range(3):
            print("  " + "; ".join(f"{name}: {ms:.2f} ms" for name, ms in product_floor().items()))
        return 0
    if args.reduce:
        import ray
        from sigmann_ray.operator import LOCAL_RAY

        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", _system_config=LOCAL_RAY)
        parameters = 1_593_810  # the MNIST MLP's
        print(f"combining two Ray actors' float32 gradients of {parameters:,} elements ({parameters * 4 / 1e6:.1f} MB), "
              f"best of 40; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        for name, ms in reduce_patterns(parameters).items():
            print(f"  {name:<58} {ms:6.2f} ms")
        return 0

    chosen = {name: CONFIGURATIONS[name] for name in (args.only or CONFIGURATIONS)}
    timer = Timer()
    runs = {}
    for name, (operator, _) in chosen.items():
        runs[name] = build_run(mnist_config(Path(args.data), args.handler, operator))
        runs[name].trainer.initialise(runs[name].handler)
    if any(operator["type"] == "ray" for operator, _ in chosen.values()):  # after the handlers: see blas_pool
        import ray
        from sigmann_ray.operator import LOCAL_RAY

        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", _system_config=LOCAL_RAY)
    results = {name: [] for name in chosen}
    for _ in range(args.rounds):
        for name, (operator, blas) in chosen.items():
            results[name].append(one_round(runs[name], operator, blas, args.iterations, args.warmup, timer))

    parameters = runs[next(iter(runs))].trainer.network.parameter_count
    bytes_per_copy = parameters * 4
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
               f"{os.getloadavg()[0]:.1f} at the end, numpy {np.__version__}, handler {args.handler}")
    print(f"MNIST MLP, global batch 200, {parameters:,} float32 parameters ({bytes_per_copy / 1e6:.1f} MB); {machine}")
    print(f"{args.rounds} alternating rounds of {args.iterations} iterations (after {args.warmup} warm-up); "
          "best round, and the median of the rounds")
    summary = {}
    for name, rounds in results.items():
        best = min(rounds, key=lambda r: r["step_ms"])
        median = statistics.median(r["step_ms"] for r in rounds)
        summary[name] = {**best, "median_step_ms": median, "rounds": rounds}
        print(f"  {name:<24} {1e3 / best['step_ms']:6.1f} it/s (median {1e3 / median:5.1f})  step "
              f"{best['step_ms']:6.1f} ms = compute {best['compute_ms']:5.1f} + update {best['update_ms']:4.1f} "
              f"+ communication {best['communication']:.0%}")
    if "threads x2" in summary and "ray x2" in summary:
        print(f"  ray x2 / threads x2 step time: {summary['ray x2']['step_ms'] / summary['threads x2']['step_ms']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "parameters": parameters, "results": summary},
                                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

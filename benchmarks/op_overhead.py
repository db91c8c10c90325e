"""What one handler op costs in Python, and the small MLP's step, in µs: for comparing two versions of the core.

Run it alternately against each version (``PYTHONPATH=<a checkout of the other core> python
benchmarks/op_overhead.py``: the checkout's ``sigma_core`` is imported instead of the installed one) and compare
the smallest figures; on a shared machine, alternate several times. Prints one JSON object.

* ``op <name>``: one call recorded on a tape, (4, 8) arrays, the best of 7 rounds of 2,000 calls;
* ``small-mlp <handler> <replayed|unreplayed>``: ``sigma bench``'s small MLP step
  (:func:`sigmann_bench.bench.build_trainer`), the best of 15 rounds of 40 steps;
* ``optimiser <name> <handler>``: ``Optimiser.step`` alone over the MNIST MLP's parameters (784-1000-800-10,
  float32), built from its run-file table (so the core's and a distribution's alike), the best of 15 rounds of
  10 steps: what resolving update rules per handler (issue 36) may cost a warm step;
* ``update <rule> <handler>``: one ``handler.optimiser_update`` on (4, 8) arrays, the best of 7 rounds of 2,000
  calls: the per-parameter cost of the rule's dispatch alone, which the step above hides under memory traffic.

``python benchmarks/op_overhead.py optimisers`` runs only the last part (``ops``, ``steps``: the others).
"""

import json
import sys
import time

import numpy as np
from sigmann_bench.bench import WORKLOADS, build_trainer, make_batches

from sigma_core import NumpyHandler, build, create_handler


def best_of(rounds: int, calls: int, fn) -> float:
    """The smallest mean µs per call of ``fn`` over ``rounds`` rounds of ``calls`` calls."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def op_costs() -> dict:
    h = NumpyHandler("float32")
    x, w, b = h.asarray(np.ones((4, 8))), h.asarray(np.ones((8, 8))), h.asarray(np.ones(8))
    ops = {"add": lambda: h.add(x, x), "dense": lambda: h.dense(x, w, b, "relu"), "sum": lambda: h.sum(x, axis=0),
           "softmax_cross_entropy": lambda: h.softmax_cross_entropy(x, x)}
    costs = {}
    for name, fn in ops.items():
        with h.tape() as tape:
            tape.watch(x, w, b)
            costs[f"op {name}"] = best_of(7, 2000, fn)
    return costs


def step_costs() -> dict:
    batches, costs = make_batches(n=8), {}
    for handler in ("numpy", "cpu"):
        for replay in (False, True):
            step = build_trainer(WORKLOADS["small-mlp"], handler, replay=replay).run_iteration
            for batch in batches * 3:  # warm: kernels compiled, the step recorded
                step(batch)
            cycle = iter(batches * (15 * 5))
            costs[f"small-mlp {handler} {'replayed' if replay else 'unreplayed'}"] = best_of(
                15, len(batches) * 5, lambda: step(next(cycle)))
    return costs


def optimiser_costs() -> dict:
    shapes = [(784, 1000), (1000,), (1000, 800), (800,), (800, 10), (10,)]
    costs, rng = {}, np.random.default_rng(0)
    for handler_name in ("cpu", "numpy"):
        h = create_handler(handler_name, dtype="float32")
        params = {f"p{i}": h.asarray(rng.standard_normal(shape)) for i, shape in enumerate(shapes)}
        grads = {pid: h.asarray(rng.standard_normal(p.shape) * 1e-3) for pid, p in params.items()}
        for name in ("momentum", "adagrad", "adam"):
            optimiser = build("optimiser", {"type": name, "learning_rate": 1e-4})
            for _ in range(5):  # warm: memory made, kernels compiled
                optimiser.step(h, params, grads)
            costs[f"optimiser {name} {handler_name}"] = best_of(15, 10, lambda: optimiser.step(h, params, grads))
        p, g, m = (h.asarray(rng.standard_normal((4, 8))) for _ in range(3))
        v = h.asarray(np.abs(rng.standard_normal((4, 8))))  # a sum or mean of squares
        calls = {"momentum": lambda: h.optimiser_update("momentum", p, g, (m,), lr=1e-4, momentum=0.9, nesterov=False),
                 "adagrad": lambda: h.optimiser_update("adagrad", p, g, (v,), lr=1e-4, eps=1e-6),
                 "adam": lambda: h.optimiser_update("adam", p, g, (m, v), lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-8,
                                                    step=3)}
        for name, call in calls.items():
            call()
            costs[f"update {name} {handler_name}"] = best_of(7, 2000, call)
    return costs


if __name__ == "__main__":
    parts = {"ops": op_costs, "steps": step_costs, "optimisers": optimiser_costs}
    print(json.dumps({k: v for part in (sys.argv[1:] or parts) for k, v in parts[part]().items()}))

"""What one handler op costs in Python, and the small MLP's step, in µs: for comparing two versions of the core.

Run it alternately against each version (``PYTHONPATH=<a checkout of the other core> python
benchmarks/op_overhead.py``: the checkout's ``sigma_core`` is imported instead of the installed one) and compare
the smallest figures; on a shared machine, alternate several times. Prints one JSON object.

* ``op <name>``: one call recorded on a tape, (4, 8) arrays, the best of 7 rounds of 2,000 calls;
* ``small-mlp <handler> <replayed|unreplayed>``: ``sigma bench``'s small MLP step
  (:func:`sigmann_bench.bench.build_trainer`), the best of 15 rounds of 40 steps.
"""

import json
import time

import numpy as np
from sigmann_bench.bench import WORKLOADS, build_trainer, make_batches

from sigma_core import NumpyHandler


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


if __name__ == "__main__":
    print(json.dumps({**op_costs(), **step_costs()}))

"""The ``ray`` operator measured: on one node against ``threads``, and on two nodes against one.

Workload: Sigma's MNIST MLP (``examples/mnist.toml``: 784-1000-800-10,
dropout, Adagrad, float32, 1,593,810 parameters = 6.4 MB of gradient), global
batch 200, on the real MNIST test set (first 8,000 images; ``--data``), and
the same network with hidden layers of 100 and 80 (87,010 parameters), so
the cost per parameter and the cost per step can be told apart. Every
configuration trains through the product's own path (``build_run``,
``[operator]``), timed per global iteration by a hook; the first
``--warmup`` iterations of a run are not counted (actor start, compilation).

Parts:

- ``--part node``: ``ray`` x2 on a local Ray instance (worker 0 is the
  driver, this process; worker 1 an actor on its node: the arrays in shared
  memory, kept in step by a compiled graph) against ``threads`` x2, in
  alternating rounds in this process, one BLAS thread per worker.
- ``--part nodes``: ``ray`` x2 joined by address to a cluster that this
  script starts with ``ray start`` (token authentication on, its own temp
  dir, stopped by killing exactly its processes at the end): one node with 2
  CPUs (the actor beside the driver: shared memory), then two nodes with
  1 CPU each (the driver on the head, the actor on the other node: Ray's
  object transfer). Each cluster's driver is a child process of this one.

Per configuration: the step time (median of the round's steps), split into
compute (the slowest worker's forward and backward pass, the driver's own
rows (worker 0) or an actor's, as each times it: ``RayOperator.busy_seconds``),
merge (the slowest worker adding up the workers' arrays and applying the
sum: ``merge_seconds``; every process does it once, at the same time) and
transfer (the rest: moving the arrays, Ray's own work, waiting for the
slower worker). Compute and merge are means over the round. Best round (by step
time) and the median of the rounds' step times.

Usage: ``python plugins/sigmann-ray/benchmarks/ray_operator.py --part node|nodes [--rounds 3] [--iterations 30]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

from sigma_core import Hook, Loop, build_run, operator_from_config, validate_run
from sigmann_threads import blas_threads

ROOT = Path(__file__).resolve().parents[3]
SIZES = {"1.59M": (1000, 800), "87k": (100, 80)}


class Steps(Hook):
    """Timestamps of every global iteration, the ray workers' compute and merge seconds so far; stops the run
    after ``count`` iterations."""

    def __init__(self, count: int):
        self.count, self.times, self.compute, self.merge = count, [], [], []

    def on_iteration(self):
        operator = self.run.loop.operator
        self.times.append(time.perf_counter())
        self.compute.append(getattr(operator, "busy_seconds", 0.0))
        self.merge.append(getattr(operator, "merge_seconds", 0.0))
        if len(self.times) == self.count:
            self.run.command("stop")


def mnist_config(data: str, hidden: tuple, operator: dict) -> dict:
    raw = tomllib.loads((ROOT / "examples" / "mnist.toml").read_text())
    raw["data"]["directory"] = data
    raw["handler"] = {"name": "cpu", "dtype": "float32"}
    raw["training"].update(batch_size=200, epochs=10_000)
    dense = [layer for layer in raw["network"]["layers"] if layer["type"] == "dense"]
    for layer, size in zip(dense, hidden):
        layer["size"] = size
    raw["operator"] = operator
    return validate_run(raw)


def one_round(run, operator: dict, iterations: int, warmup: int) -> dict:
    """``warmup + iterations`` global iterations; the counted ones' median step and mean compute and merge."""
    steps = Steps(warmup + iterations)
    with blas_threads(1):
        Loop(run.trainer, operator_from_config(run.trainer, operator), epochs=10_000, hooks=[steps],
             config=run.config).run()
    step = float(np.median(np.diff(steps.times[warmup - 1:])))
    compute = (steps.compute[-1] - steps.compute[warmup - 1]) / iterations
    merge = (steps.merge[-1] - steps.merge[warmup - 1]) / iterations
    if operator["type"] != "ray":
        compute = merge = float("nan")  # the threads operator does not split its step
    return {"step_ms": step * 1e3, "compute_ms": compute * 1e3, "merge_ms": merge * 1e3,
            "transfer_ms": (step - compute - merge) * 1e3}


def summary(rounds: list) -> dict:
    best = min(rounds, key=lambda r: r["step_ms"])
    return {**best, "median_step_ms": statistics.median(r["step_ms"] for r in rounds), "rounds": len(rounds)}


def line(name: str, result: dict) -> str:
    split = "" if np.isnan(result["compute_ms"]) else (
        f" = compute {result['compute_ms']:5.1f} + merge {result['merge_ms']:4.1f} + transfer "
        f"{result['transfer_ms']:5.1f}")
    return f"  {name:<34} step {result['step_ms']:6.1f} ms (median {result['median_step_ms']:6.1f}){split}"


def measure(configurations: dict, args) -> dict:
    """Alternating rounds of each configuration ``name -> (hidden sizes, operator)``; best and median."""
    runs = {}
    for name, (hidden, operator) in configurations.items():
        runs[name] = build_run(mnist_config(args.data, hidden, operator))
        runs[name].trainer.initialise(runs[name].handler)
    rounds = {name: [] for name in configurations}
    for _ in range(args.rounds):
        for name, (_, operator) in configurations.items():
            rounds[name].append(one_round(runs[name], operator, args.iterations, args.warmup))
    return {name: summary(results) for name, results in rounds.items()}


def machine() -> str:
    return f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"


# -- two clusters started here -----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def start_cluster(base: Path, nodes: int) -> tuple[str, dict]:
    """``nodes`` Ray nodes on this machine (2 CPUs in all), token authentication on; returns (address, env)."""
    ray = str(Path(sys.executable).with_name("ray"))
    token = base / "token"
    token.write_text(secrets.token_hex(32))
    environment = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    environment.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    common = ["--num-cpus", str(2 // nodes), "--object-store-memory", str(200 * 2**20), "--disable-usage-stats",
              "--dashboard-agent-listen-port"]
    said = subprocess.run([ray, "start", "--head", "--port", str(free_port()), "--temp-dir", str(base / "n0"),
                           "--include-dashboard", "false", "--dashboard-port", str(free_port()),
                           "--ray-client-server-port", str(free_port()), *common, str(free_port())],
                          env=environment, capture_output=True, text=True, check=True)
    address = re.search(r"ray start --address='([^']+)'", said.stdout + said.stderr).group(1)
    for node in range(1, nodes):
        subprocess.run([ray, "start", "--address", address, "--temp-dir", str(base / f"n{node}"), *common,
                        str(free_port())], env=environment, capture_output=True, text=True, check=True)
    return address, environment


def stop_cluster(base: Path) -> None:
    """Kill exactly the processes whose command line names ``base``, and their children (not ``ray stop``,
    which stops every Ray instance on the machine)."""
    def table():
        found = {}
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                command = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace")
                found[int(name)] = (int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1]),
                                    command)
            except (OSError, ValueError):
                continue
        return found

    for kill in (signal.SIGTERM, signal.SIGKILL):
        processes = table()
        ours = {pid for pid, (_, command) in processes.items() if str(base) in command}
        while children := {pid for pid, (parent, _) in processes.items() if parent in ours} - ours:
            ours |= children
        for pid in ours - {os.getpid()}:
            try:
                os.kill(pid, kill)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(3)


def nodes_part(args) -> None:
    print(f"ray x2 joined by address (token on); {machine()} at the start; best of {args.rounds} rounds of "
          f"{args.iterations} iterations; per step: compute + merge + transfer (the rest)")
    for nodes in (1, 2):
        base = Path(tempfile.mkdtemp(prefix="sgb", dir="/tmp"))
        try:
            address, environment = start_cluster(base, nodes)
            child = subprocess.run([sys.executable, __file__, "--child", address, "--rounds", str(args.rounds),
                                    "--iterations", str(args.iterations), "--warmup", str(args.warmup),
                                    "--data", args.data], env=environment, capture_output=True, text=True)
            if child.returncode:
                raise SystemExit(child.stderr)
            results = json.loads(child.stdout.strip().splitlines()[-1])
        finally:
            stop_cluster(base)
            shutil.rmtree(base, ignore_errors=True)
        for name, result in results.items():
            print(line(f"{name}, {nodes} node{'s' if nodes > 1 else ''}", result))
    print(f"  ({machine()} at the end)")


def child_part(args) -> None:
    operator = {"type": "ray", "workers": 2, "blas_threads": 1, "address": args.child}
    configurations = {f"{size} parameters": (hidden, operator) for size, hidden in SIZES.items()}
    print(json.dumps(measure(configurations, args)))


def node_part(args) -> None:
    import ray

    from sigmann_ray.operator import LOCAL_RAY

    hidden = SIZES["1.59M"]
    configurations = {"threads x2": (hidden, {"type": "threads", "workers": 2, "blas_threads": 1}),
                      "ray x2 (shared memory)": (hidden, {"type": "ray", "workers": 2, "blas_threads": 1})}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False,
             _system_config=LOCAL_RAY)
    began = machine()
    results = measure(configurations, args)
    print(f"MNIST MLP (1.59M parameters), global batch 200, cpu handler, 1 BLAS thread per worker; {began} at the "
          f"start, {machine()} at the end; best of {args.rounds} alternating rounds of {args.iterations} iterations")
    for name, result in results.items():
        print(line(name, result))
    ratio = results["ray x2 (shared memory)"]["step_ms"] / results["threads x2"]["step_ms"]
    medians = results["ray x2 (shared memory)"]["median_step_ms"] / results["threads x2"]["median_step_ms"]
    print(f"  ray x2 / threads x2 step time: {ratio:.2f} (medians: {medians:.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["node", "nodes"], default="node")
    parser.add_argument("--data", default="/work/shared/data/mnist", help="directory with the MNIST IDX files")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--child", metavar="ADDRESS", help=argparse.SUPPRESS)  # a driver joining a cluster
    args = parser.parse_args()
    if args.child:
        child_part(args)
    elif args.part == "node":
        node_part(args)
    else:
        nodes_part(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory over a long run: resident set size after every epoch, which must stay flat.

Issue 24's workload: MNIST's official test set (10,000 images; the first 8,000
train, the last 2,000 are held out and evaluated after every epoch), a
784-1000-800-10 network with dropout (``examples/mnist.toml``'s), Adagrad,
batch 100, training steps compiled (``training.compile = "auto"``: recorded
and replayed when sigmann-replay is installed). It trains for ``--minutes``
(default 5) and at least ``--min-epochs`` epochs and prints, per epoch, the
process's current RSS; at the end the first epoch's against the last one's,
as a difference and a ratio, and the growth per epoch fitted over the second
half of the run (after warm-up, allocator caches and replay recordings have
settled). A run whose memory is flat grows by well under 1 MB per epoch; the
leak issue 24 found kept every held-out evaluation's arrays: +13.8 MB per epoch.

``--hooks metrics,web`` attaches the core's metrics hook and sigmann-web's
dashboard (on a free local port), ``--operator threads`` trains with
sigmann-threads' data-parallel workers; ``--compile none`` turns replay off.

Usage: ``python benchmarks/memory.py --data DIR [--handler cpu] [--minutes 5] [--json]``,
``DIR`` holding ``t10k-images-idx3-ubyte[.gz]`` and ``t10k-labels-idx1-ubyte[.gz]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import tempfile
import time

from sigma_core import Hook, Loop, SigmaError, build_run, operator_from_config
from sigmann_monitors import MetricsHook
from sigma_core import config as run_config

LAYERS = [{"type": "input", "shape": [28, 28]}, {"type": "dropout", "p": 0.2},
          {"type": "dense", "size": 1000, "activation": "relu"}, {"type": "dropout", "p": 0.4},
          {"type": "dense", "size": 800, "activation": "relu"}, {"type": "dropout", "p": 0.4},
          {"type": "dense", "size": 10}, {"type": "softmax_ce"}]


def run_file(data: str, handler: str, compile_: str, operator: str) -> dict:
    """Issue 24's run, as a validated run file."""
    return run_config.validate({
        "name": "memory", "seed": 0, "handler": {"name": handler, "dtype": "float32"},
        "data": {"extractor": "mnist", "directory": data, "train": False, "download": False},
        "split": {"train": [0, 8000], "validation": [8000, 10000]},
        "network": {"layers": LAYERS},
        "initialisers": {"*.weights": {"type": "gaussian", "std": 0.1}, "*.biases": {"type": "gaussian", "std": 0.05}},
        "optimiser": {"type": "adagrad", "learning_rate": 0.02},
        "operator": {"type": operator},
        "training": {"batch_size": 100, "epochs": 1, "compile": compile_},
    })


def rss_mb() -> float:
    """The process's resident set size now, in MB (its peak where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return peak_rss_mb()


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6  # bytes on macOS, KiB elsewhere


class Watch(Hook):
    """Notes the RSS after every epoch; stops the run once it has lasted ``seconds`` and ``min_epochs``."""

    name = "memory"
    order = 1000  # after every other hook's on_epoch

    def __init__(self, seconds: float, min_epochs: int, quiet: bool):
        self.seconds, self.min_epochs, self.quiet = seconds, min_epochs, quiet
        self.rows = []
        self.started = time.perf_counter()

    def on_epoch(self, report):
        elapsed = time.perf_counter() - self.started
        self.rows.append({"epoch": report.epoch, "seconds": round(elapsed, 1), "rss_mb": round(rss_mb(), 1),
                          "accuracy": round(report.validation["validation"]["accuracy"], 4)})
        if not self.quiet:
            row = self.rows[-1]
            print(f"epoch {row['epoch']:>4}  {row['seconds']:>7.1f} s  RSS {row['rss_mb']:>8.1f} MB  "
                  f"held-out accuracy {row['accuracy']:.4f}", flush=True)
        if elapsed >= self.seconds and len(self.rows) >= self.min_epochs:
            self.run.command("stop")


def extra_hooks(names: list, directory: str) -> list:
    hooks = []
    for name in names:
        if name == "metrics":
            hooks.append(MetricsHook(directory=directory))
        elif name == "web":
            from sigmann_web.hook import WebHook

            hooks.append(WebHook(port=0))
        else:
            raise SystemExit(f"memory.py: unknown hook {name!r} (metrics, web)")
    return hooks


def growth_per_epoch(rows: list) -> float:
    """Least-squares MB per epoch over the second half of the epochs."""
    tail = rows[len(rows) // 2:]
    if len(tail) < 2:
        return 0.0
    xs, ys = [r["epoch"] for r in tail], [r["rss_mb"] for r in tail]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder with MNIST's t10k IDX files")
    parser.add_argument("--handler", default="cpu")
    parser.add_argument("--minutes", type=float, default=5.0, help="train at least this long (default 5)")
    parser.add_argument("--min-epochs", type=int, default=3, help="and at least this many epochs (default 3)")
    parser.add_argument("--compile", default="auto", help='training.compile: "auto" (replay), "replay", "none"')
    parser.add_argument("--operator", default="single_worker", help="single_worker (default) or threads")
    parser.add_argument("--hooks", default="", help="comma-separated: metrics, web")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end, nothing per epoch")
    args = parser.parse_args()
    if args.minutes <= 0 or args.min_epochs < 2:
        raise SystemExit("memory.py: --minutes must be > 0 and --min-epochs >= 2")
    logging.getLogger("sigma").setLevel(logging.WARNING)

    try:
        run = build_run(run_file(args.data, args.handler, args.compile, args.operator))
    except SigmaError as error:  # no MNIST files there, an unknown handler, ...
        raise SystemExit(f"memory.py: {error}") from None
    run.trainer.initialise(run.handler)
    watch = Watch(args.minutes * 60, args.min_epochs, args.json)
    with tempfile.TemporaryDirectory() as directory:
        hooks = extra_hooks([n for n in args.hooks.split(",") if n], directory)
        operator = operator_from_config(run.trainer, run.config["operator"])
        Loop(run.trainer, operator, epochs=10**9, hooks=[*hooks, watch], config=run.config).run()
    rows = watch.rows
    first, last = rows[0]["rss_mb"], rows[-1]["rss_mb"]
    summary = {"handler": run.handler.name, "compile": args.compile, "operator": args.operator, "hooks": args.hooks,
               "epochs": len(rows), "seconds": rows[-1]["seconds"], "first_rss_mb": first, "last_rss_mb": last,
               "difference_mb": round(last - first, 1), "ratio": round(last / first, 3),
               "growth_mb_per_epoch": round(growth_per_epoch(rows), 3), "peak_rss_mb": round(peak_rss_mb(), 1)}
    if args.json:
        print(json.dumps({**summary, "rows": rows}, indent=2))
        return
    print(f"{summary['epochs']} epochs in {summary['seconds']:.0f} s on {summary['handler']}: RSS {first:.1f} MB after "
          f"epoch 1, {last:.1f} MB after the last (difference {summary['difference_mb']:+.1f} MB, ratio "
          f"{summary['ratio']:.3f}); {summary['growth_mb_per_epoch']:+.3f} MB per epoch over the second half; "
          f"peak {summary['peak_rss_mb']:.1f} MB")


if __name__ == "__main__":
    main()

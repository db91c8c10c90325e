"""``sigma bench``, added to the ``sigma`` command through the ``register_commands`` hook.

Building the parser imports nothing heavy: :mod:`sigmann_bench.bench` (and,
when present, PyTorch and JAX) loads only when the command runs.
"""

from __future__ import annotations

import argparse

from sigma_core import hookimpl


@hookimpl
def register_commands(cli):
    parser = cli.add_parser(
        "bench",
        help="time training iterations on every installed handler (and PyTorch/JAX if present)",
        description="Median ms per training iteration of two MLP workloads on every installed "
        "handler, a hand-written NumPy loop, and PyTorch/JAX when importable.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    parser.add_argument("--quick", action="store_true", help="few iterations, for a smoke test")
    parser.add_argument("--handlers", nargs="+", metavar="NAME", help="only these handlers (default: all that run here)")
    parser.add_argument("--workloads", nargs="+", metavar="NAME",
                        help="only these workloads: sigma-mlp, small-mlp, probe, startup (whole `sigma train` "
                        "processes of examples/digits.toml, cpu against numpy), and those other distributions add "
                        "(sigmann-vision: cnn) (default: the first two)")
    parser.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from sigmann_bench import bench

    return bench.main(args)

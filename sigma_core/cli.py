"""The ``sigma`` command.

Each subcommand is an ``add_<name>_parser(subparsers)`` function listed in
:data:`SUBCOMMANDS`; it builds its parser and sets ``run`` to a function taking
the parsed arguments and returning an exit status. To add a subcommand, write
one such function and list it.

A :class:`~sigma_core.errors.SigmaError` is a problem the user can fix, so it
is printed as one ``error:`` line and the exit status is 2; ``--debug`` shows
the traceback instead. Any other exception is a bug and always shows its
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys

from sigma_core.errors import SigmaError


def main(argv: list[str] | None = None) -> int:
    """Run ``sigma`` with ``argv`` (default: the process arguments); return the exit status."""
    args = build_parser().parse_args(argv)
    with _logging_to_stderr(args.debug):
        try:
            return args.run(args)
        except SigmaError as exc:
            if args.debug:
                raise
            print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sigma", description="Sigma: a plugin-based machine-learning framework."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add_parser in SUBCOMMANDS:
        add_parser(subparsers)
    return parser


@contextlib.contextmanager
def _logging_to_stderr(debug: bool):
    """Show the ``sigma`` logger on stderr (info, e.g. the handler chosen) while a command runs.

    Undone afterwards, so calling :func:`main` in-process (tests, notebooks)
    leaves logging as it was.
    """
    logger = logging.getLogger("sigma")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sigma: %(message)s"))
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)


# --- sigma plugins ----------------------------------------------------------


def add_plugins_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "plugins",
        help="list registered components and failed plugins",
        description="List every registered component, whether it can run here, "
        "and the plugins that failed to load.",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.set_defaults(run=run_plugins)


def run_plugins(args: argparse.Namespace) -> int:
    from sigma_core import plugins

    rows = [_component_row(c) for c in plugins.components()]
    failed = [_failure_row(f) for f in plugins.failures()]
    if args.json:
        print(json.dumps(rows + failed, indent=2))
    else:
        _print_plugins_table(rows, failed)
    return 0


def _component_row(component) -> dict:
    available, reason = component.availability()
    return {
        "kind": component.kind,
        "name": component.name,
        "aliases": list(component.aliases),
        "distribution": component.distribution,
        "version": component.version,
        "rank": component.rank,
        "description": component.description,
        "available": available,
        "reason": reason,
    }


def _failure_row(failure) -> dict:
    return {
        "kind": "plugin-failure",
        "name": failure.name,
        "aliases": [],
        "distribution": failure.distribution,
        "version": failure.version,
        "available": False,
        "reason": failure.error,
    }


def _print_plugins_table(rows: list[dict], failed: list[dict]) -> None:
    """Plain aligned text: it never wraps or truncates, so it greps and pipes well."""
    header = ("KIND", "NAME", "ALIASES", "DISTRIBUTION", "VERSION", "STATUS")
    lines = [header] + [
        (
            row["kind"],
            row["name"],
            ", ".join(row["aliases"]),
            row["distribution"],
            row["version"],
            "available" if row["available"] else f"unavailable — {row['reason']}",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(line, widths)), line[-1]]))
    if failed:
        print(f"\n{len(failed)} plugin(s) failed to load:")
        for row in failed:
            print(f"  {row['name']} ({row['distribution']} {row['version']}): {row['reason']}")


# --- sigma train ------------------------------------------------------------


def add_train_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train the run a TOML file describes",
        description="Train the network a run file describes and report held-out accuracy.",
    )
    parser.add_argument("config", help="run file (TOML)")
    parser.add_argument("--handler", help="computation handler (overrides SIGMA_HANDLER and the run file)")
    parser.add_argument("--dtype", choices=("float32", "float64"), help="override handler.dtype")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override any run-file key, e.g. --set training.epochs=3 (repeatable)")
    parser.add_argument("--out", metavar="RESULT.json", help="write the result summary as JSON")
    parser.add_argument("--resume", metavar="CHECKPOINT",
                        help="continue exactly where this checkpoint (see [checkpoint] in the run file) left off")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks and debug logging")
    parser.set_defaults(run=run_train)


def run_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sigma_core import config as run_config
    from sigma_core.checkpoint import load_checkpoint
    from sigma_core.run import build_run

    overrides = list(args.overrides)
    if args.dtype:
        overrides.append(f"handler.dtype={args.dtype}")
    cfg = run_config.load(args.config, overrides)
    # Read before anything is built, so a bad checkpoint is the only line printed.
    checkpoint = load_checkpoint(args.resume) if args.resume else None
    if checkpoint is not None and checkpoint.trainer["epoch"] >= cfg["training"]["epochs"]:
        raise SigmaError(
            f"{args.resume}: the checkpoint has {checkpoint.trainer['epoch']} epochs done and the run has "
            f"training.epochs = {cfg['training']['epochs']}: nothing left to train (raise it with --set)"
        )
    run = build_run(cfg, handler_name=args.handler)
    if checkpoint is not None:
        run.resume(checkpoint)
    observers = []
    if not args.quiet:
        from sigma_core.progress import EpochProgress

        observers.append(EpochProgress(run.epochs))
    summary = run.train(observers)
    accuracy = "n/a" if summary["accuracy"] is None else f"{summary['accuracy']:.2%}"
    print(
        f"{summary['name']}: {summary['epochs']} epochs in {summary['seconds']:.1f}s on "
        f"{summary['handler']} ({summary['dtype']}); final cost {summary['cost']:.4f}, "
        f"held-out accuracy {accuracy}"
    )
    if args.out:
        _write_json_atomically(Path(args.out), summary)
    return 0


def _write_json_atomically(path, payload) -> None:
    """Write JSON so that a crash never leaves half a file."""
    from sigma_core.atomic import atomic_write

    with atomic_write(path, "w") as stream:
        json.dump(payload, stream, indent=2)


# --- sigma eval -------------------------------------------------------------


def add_eval_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="accuracy and cost of a checkpoint on a dataset",
        description="Load a checkpoint's parameters and report accuracy and cost on a dataset of its run: "
        "the held-out split by default.",
    )
    parser.add_argument("checkpoint", help="checkpoint file (.ckpt)")
    parser.add_argument("--data-config", metavar="RUNFILE",
                        help="take [data] and [split] from this run file instead of the checkpoint's run config")
    parser.add_argument("--dataset", default="validation",
                        help="validation (the held-out split, default) or training")
    parser.add_argument("--handler", help="computation handler (any: parameters load across handlers)")
    parser.add_argument("--dtype", choices=("float32", "float64"), help="default: the checkpoint's")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks and debug logging")
    parser.set_defaults(run=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    import copy

    from sigma_core import config as run_config
    from sigma_core.checkpoint import load_checkpoint
    from sigma_core.data import MinibatchIterator
    from sigma_core.run import build_run

    checkpoint = load_checkpoint(args.checkpoint)
    cfg = copy.deepcopy(checkpoint.config)
    if args.data_config:
        data_cfg = run_config.load(args.data_config)
        if cfg is None:
            cfg = data_cfg
        else:
            cfg["data"], cfg["split"] = data_cfg["data"], data_cfg["split"]
    if cfg is None:
        raise SigmaError(f"{args.checkpoint}: the checkpoint has no run config (saved from code); "
                         "pass --data-config RUNFILE")
    cfg["handler"]["dtype"] = args.dtype or checkpoint.metadata["handler"]["dtype"]
    run = build_run(cfg, handler_name=args.handler)
    trainer = run.trainer
    trainer.initialise(run.handler)
    trainer.network.load_state_dict(checkpoint.parameters)
    datasets = dict(trainer.validation)
    datasets["training"] = MinibatchIterator(
        trainer.training_iterator.dataset, cfg["training"]["validation_batch_size"], shuffle=False
    )
    if args.dataset not in datasets:
        raise SigmaError(f"no dataset {args.dataset!r} (choose one of {', '.join(datasets)})")
    report = trainer.evaluate(datasets[args.dataset])
    report.update(checkpoint=str(args.checkpoint), dataset=args.dataset, epoch=checkpoint.trainer["epoch"],
                  iteration=checkpoint.trainer["iteration"], handler=run.handler.name, dtype=run.handler.dtype)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.checkpoint}: {report['dataset']} ({report['records']} records): "
              f"accuracy {report['accuracy']:.2%}, cost {report['cost']:.4f}")
    return 0


# --- sigma bench ------------------------------------------------------------


def add_bench_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="time training iterations on every installed handler (and PyTorch/JAX if present)",
        description="Median ms per training iteration of two MLP workloads on every installed "
        "handler, a hand-written NumPy loop, and PyTorch/JAX when importable.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    parser.add_argument("--quick", action="store_true", help="few iterations, for a smoke test")
    parser.add_argument("--handlers", nargs="+", metavar="NAME", help="only these handlers (default: all that run here)")
    parser.add_argument("--workloads", nargs="+", metavar="NAME", help="only these workloads: sigma-mlp, small-mlp")
    parser.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from sigma_core import bench

    return bench.main(args)


SUBCOMMANDS = (add_plugins_parser, add_train_parser, add_eval_parser, add_bench_parser)


if __name__ == "__main__":
    sys.exit(main())

"""``sigma train``: train the run a TOML file describes."""

from __future__ import annotations

import argparse
import json

from sigma_core.errors import SigmaError


def add_parser(subparsers) -> None:
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
    cost = "n/a" if summary["cost"] is None else f"{summary['cost']:.4f}"  # e.g. stopped inside epoch 1
    print(
        f"{summary['name']}: {summary['epochs']} epochs in {summary['seconds']:.1f}s on "
        f"{summary['handler']} ({summary['dtype']}); final cost {cost}, held-out accuracy {accuracy}"
    )
    if args.out:
        _write_json_atomically(Path(args.out), summary)
    return 0


def _write_json_atomically(path, payload) -> None:
    """Write JSON so that a crash never leaves half a file."""
    from sigma_core.atomic import atomic_write

    with atomic_write(path, "w") as stream:
        json.dump(payload, stream, indent=2)

"""``sigma train``: train the run a TOML file describes."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import sys
import threading
from pathlib import Path

from sigma_core import config as run_config
from sigma_core.atomic import atomic_write, check_writable
from sigma_core.errors import SigmaError
from sigma_core.hooks import Hook

from . import options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", parents=[options.HANDLER, options.DEBUG], help="train the run a TOML file describes",
        description="Train the network a run file describes and report held-out accuracy.")
    parser.add_argument("config", help="run file (TOML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override any run-file key, e.g. --set training.epochs=3 (repeatable)")
    parser.add_argument("--out", metavar="RESULT.json", help="write the result summary as JSON")
    parser.add_argument("--resume", metavar="CHECKPOINT|DIR|last",
                        help="continue exactly where a checkpoint left off: a file, or the newest valid one of this "
                        "run in DIR or (last) in the run file's checkpoint.directory")
    parser.add_argument("--monitor", "--hook", dest="monitors", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
                        help="attach a hook (see `sigma plugins`), e.g. --monitor metrics:every=10 (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no network summary, no progress bars")
    parser.set_defaults(run=run_train)


def run_train(args) -> int:
    from sigma_core.run import build_run  # imports numpy: not on every sigma command's path

    overrides = list(args.overrides)
    if args.dtype:
        overrides.append(f"handler.dtype={args.dtype}")
    cfg = run_config.load(args.config, overrides)
    # Everything that can be refused is refused before anything is built, in one line.
    checkpoint = _checkpoint_to_resume(args.resume, cfg) if args.resume else None
    if checkpoint is not None and checkpoint.trainer["epoch"] >= cfg["training"]["epochs"]:
        raise SigmaError(f"{checkpoint.path}: the checkpoint has {checkpoint.trainer['epoch']} epochs done and the run "
                         f"has training.epochs = {cfg['training']['epochs']}: nothing left to train (raise it with --set)")
    out = check_writable(args.out, what="--out") if args.out else None  # refused now, not after training
    run = build_run(cfg, handler_name=args.handler)
    if checkpoint is not None:
        run.resume(checkpoint)
    if not args.quiet:  # stderr: stdout holds only the result line
        print(run.trainer.network.summary(), file=sys.stderr)
    summary = _train_guarded(args, run, _hooks(args, run))
    if summary is None:  # stopped by Ctrl-C
        return 130
    accuracy = "n/a" if summary["accuracy"] is None else f"{summary['accuracy']:.2%}"
    cost = "n/a" if summary["cost"] is None else f"{summary['cost']:.4f}"  # e.g. stopped inside epoch 1
    trained = summary["epochs"] - (checkpoint.trainer["epoch"] if checkpoint else 0)
    epochs = f"{trained} epoch{'s' * (trained != 1)}" + (f" (of {summary['epochs']} in all)" if checkpoint else "")
    print(f"{summary['name']}: {epochs} in {summary['seconds']:.1f}s on "
          f"{summary['handler']} ({summary['dtype']}); final cost {cost}, held-out accuracy {accuracy}")
    if out:
        with atomic_write(out, "w", what="--out") as stream:  # a crash never leaves half a file
            json.dump(summary, stream, indent=2)
    return 0


def _checkpoint_to_resume(resume: str, cfg: dict):
    """The checkpoint ``--resume`` names: a file, or the newest one of this run in a directory that loads."""
    from sigma_core.checkpoint import CheckpointError, checkpoints, load_checkpoint

    directory = Path(cfg["checkpoint"]["directory"] if resume == "last" else resume)
    if not directory.is_dir():
        return load_checkpoint(resume)
    for path in reversed(checkpoints(directory, cfg["name"])):
        try:
            return load_checkpoint(path)
        except CheckpointError as error:
            print(f"skipping {error}", file=sys.stderr)
    raise SigmaError(f"--resume {resume}: no valid checkpoint of run {cfg['name']!r} in {directory}")


def _hooks(args, run) -> list:
    """The ``--monitor`` hooks, plus the progress bars unless ``--quiet`` or the run file has them."""
    from sigma_core.hooks.tables import hooks_from_tables, parse_hook_option

    specs = [parse_hook_option(text) for text in args.monitors]  # a plugin's option may add to it (--explain)
    if not args.quiet and "progress" not in {hook.name for hook in run.hooks} | {s["type"] for s in specs}:
        specs.insert(0, {"type": "progress"})
    return hooks_from_tables(specs, where="--monitor")


def _train_guarded(args, run, hooks) -> dict | None:
    """Train holding this run's lock in every checkpoint directory; on Ctrl-C save, say how to resume, return None.

    The first Ctrl-C stops the run at the next iteration boundary, the second
    aborts at once (what is on disk stays whole: writes are atomic).
    """
    import numpy

    from sigma_core.checkpoint import run_lock
    from sigma_core.hooks.checkpoints import CheckpointHook

    savers = [hook for hook in run.hooks if isinstance(hook, CheckpointHook)]
    ctrl_c = StopOnCtrlC()
    with contextlib.ExitStack() as locks:
        for directory in dict.fromkeys(saver.directory for saver in savers):
            locks.enter_context(run_lock(directory, run.trainer.name))
        with numpy.errstate(all="ignore"):  # an overflow is reported by the non-finite checks, in one line
            summary = run.train([*hooks, ctrl_c])
        if not ctrl_c.interrupted:
            return summary
        trainer = run.trainer
        where = (f"interrupted after training step {trainer.total_iterations} (epoch "
                 f"{trainer.epoch + trainer.in_epoch}, iteration {trainer.iteration})")
        if not savers:
            print(f"{where}; nothing saved: the run file has no [checkpoint] section", file=sys.stderr)
            return None
        path = savers[0].save(trainer)
    flags = [f"--{key}={value}" for key, value in (("handler", args.handler), ("dtype", args.dtype)) if value]
    command = ["sigma", "train", args.config, *flags, *(f"--set={o}" for o in args.overrides), "--resume", str(path)]
    print(f"{where}; saved {path}; resume with: {shlex.join(command)}", file=sys.stderr)
    return None


class StopOnCtrlC(Hook):
    """Turns Ctrl-C into a stop at the next iteration boundary; a second Ctrl-C aborts at once."""

    name, interrupted, previous = "ctrl-c", False, None
    order = -1_000_000  # attached first: from then on Ctrl-C stops the run, and a KeyboardInterrupt is a hook's own

    def attach(self, run):
        super().attach(run)
        if threading.current_thread() is threading.main_thread():  # only there can signals be caught
            self.previous = signal.signal(signal.SIGINT, self.interrupt)

    def interrupt(self, signum, frame):
        self.interrupted = True
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # From another thread: this handler may run while the training thread holds the loop's lock.
        threading.Thread(target=self.run.loop.signal_stop, daemon=True).start()

    def detach(self):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

"""``sigma train``: train the run a TOML file describes.

Each run writes into its own directory, ``runs/<name>/version_N`` (:mod:`sigma_core.training.rundir`); a resumed run
continues in its checkpoint's. However the run ends, it saves a checkpoint (where ``[checkpoint]`` saves, else in the
run directory's ``checkpoints/``) and prints one line on stderr: what ended it, the checkpoint, the command that
resumes from it. Exit status: 0 when the epochs ran out or a hook's criterion stopped the run, 3 for the web page's
Stop, 130 for Ctrl-C, 143 for SIGTERM, 2 for an error (one ``error:`` line), :data:`HOOK_FAILED` with --strict.
"""

import contextlib
import json
import signal
import sys
import threading
from pathlib import Path

from sigma_core import config as run_config
from sigma_core.atomic import atomic_write, check_writable
from sigma_core.errors import SigmaError, one_line
from sigma_core.hooks import Hook
from sigma_core.training.rundir import ROOT, new_version, versions

from sigma_core.cli import options


#: sigma train --strict's exit status when a run trained to its end but a hook failed and was detached on the way.
HOOK_FAILED = 4


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "train", parents=[options.HANDLER, options.SET, options.DEBUG], help="train the run a TOML file describes",
        description="Train the network a run file describes and report held-out accuracy.")
    parser.add_argument("config", help="run file (TOML)")
    parser.add_argument("--out", metavar="RESULT.json", help="write the result summary as JSON")
    parser.add_argument("--resume", metavar="CHECKPOINT|DIR|last",
                        help="continue exactly where a checkpoint left off: a file, or the newest valid one of this "
                        "run in DIR (a checkpoint folder, a run directory or runs/<name>) or (last) in the run file's "
                        "checkpoint.directory and runs/<name>")
    parser.add_argument("--monitor", "--hook", dest="monitors", action="append", default=[],
                        metavar="NAME[:KEY=VALUE,...]",
                        help="attach a hook (see `sigma plugins`), e.g. --monitor metrics:every=10 (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no network summary, no progress bars, no INFO logs")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit with status {HOOK_FAILED} when a hook failed (it is detached and training goes on)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the run file with every default filled in (TOML) and exit without training")
    return parser


def main(args) -> int:
    from sigma_core.hooks.tables import parse_hook_option
    from sigma_core.run import build_run  # imports numpy: not on every sigma command's path

    if args.print_config:  # sigmann-help's `sigma config`, with this command's options
        from sigma_core import plugins

        if "config" not in {c.name for c in plugins.components("command")}:
            raise SigmaError(f"--print-config needs the `sigma config` command, which is not installed; {plugins.MORE}")
        from sigma_core.cli import build_parser

        flags = [*(f"--set={o}" for o in options.run_overrides(args)), *(f"--monitor={m}" for m in args.monitors)]
        config = build_parser().parse_args(["config", args.config, *flags])
        return config.run(config)
    cfg = run_config.load(args.config, options.run_overrides(args))
    # Everything that can be refused is refused before anything is built, in one line.
    checkpoint = _checkpoint_to_resume(args.resume, cfg) if args.resume else None
    if checkpoint is not None and checkpoint.trainer["epoch"] >= cfg["training"]["epochs"]:
        raise SigmaError(f"{checkpoint.path}: the checkpoint has {checkpoint.trainer['epoch']} epochs done and the "
                         f"run has training.epochs = {cfg['training']['epochs']}: nothing left to train (raise it with "
                         "--set)")
    out = check_writable(args.out, what="--out") if args.out else None  # refused now, not after training
    run = build_run(cfg)
    # --monitor hooks are saved in the checkpoints (beyond the run file's): --resume brings back those not given.
    given = [parse_hook_option(text) for text in args.monitors]
    old = (checkpoint.config or {}).get("hooks", []) if checkpoint else []
    for table, saved in zip(cfg["hooks"], old):  # the run file's hooks come first: each gets back what it
        if saved.items() >= table.items():  # recorded in its table (Hook.table), which the checkpoint holds
            table.update(saved)
    saved = [table for table in old if table not in cfg["hooks"]
             and table.get("type") not in {spec["type"] for spec in given}]
    run.config["hooks"] = [*run.config["hooks"], *given, *saved]
    if checkpoint is not None:
        run.resume(checkpoint)  # in its run directory, if it has one
    run.directory = run.directory or new_version(cfg["name"])
    flags = [f"--{key}={value}" for key, value in (("handler", args.handler), ("dtype", args.dtype)) if value]
    run.command_line = ["sigma", "train", args.config, *flags, *(f"--set={o}" for o in args.overrides)]
    if not args.quiet:  # stderr: stdout holds only the result line
        print(run.trainer.network.summary(), file=sys.stderr)
    summary, status = _train_guarded(run, _hooks(args, run, [*given, *saved]))
    accuracy = "n/a" if summary["accuracy"] is None else f"{summary['accuracy']:.2%}"
    cost = "n/a" if summary["cost"] is None else f"{summary['cost']:.4f}"  # e.g. stopped inside epoch 1
    trained = summary["epochs"] - (checkpoint.trainer["epoch"] if checkpoint else 0)
    epochs = f"{trained} epoch{'s' * (trained != 1)}" + (f" (of {summary['epochs']} in all)" if checkpoint else "")
    print(f"{summary['name']}: {epochs} in {summary['seconds']:.1f}s on "
          f"{summary['handler']} ({summary['dtype']}); final cost {cost}, held-out accuracy {accuracy}")
    failed = [f"{failure['hook']!r} ({failure['event']})" for failure in summary["hook_failures"]]
    if failed:  # each was reported when it failed, perhaps long ago: the end of the run names them again
        print(f"sigma: hook{'s' * (len(failed) > 1)} that failed and {'were' if len(failed) > 1 else 'was'} "
              f"detached: {', '.join(failed)}", file=sys.stderr)
    if out:
        with atomic_write(out, "w", what="--out") as stream:  # a crash never leaves half a file
            json.dump(summary, stream, indent=2)
    return status or (HOOK_FAILED if failed and args.strict else 0)


def _checkpoint_to_resume(resume: str, cfg: dict):
    """The checkpoint ``--resume`` names: a file, or the newest one of this run that loads in a folder, its
    ``checkpoints/`` or its versions' (``last``: the run file's checkpoint.directory and ``runs/<name>``)."""
    from sigma_core.training.checkpoint import CheckpointError, checkpoints, load_checkpoint

    if resume != "last" and not Path(resume).is_dir():
        return load_checkpoint(resume)
    roots = [Path(cfg["checkpoint"]["directory"]), ROOT / cfg["name"]] if resume == "last" else [Path(resume)]
    folders = [folder for root in roots for folder in (root, root / "checkpoints", *(
        version / "checkpoints" for version in versions(root)))]
    found = sorted((path for folder in folders for path in checkpoints(folder, cfg["name"])),
                   key=lambda path: path.stat().st_mtime_ns)
    for path in reversed(found):
        try:
            return load_checkpoint(path)
        except CheckpointError as error:
            print(f"skipping {error}", file=sys.stderr)
    where = " or ".join(map(str, roots))
    raise SigmaError(f"--resume {resume}: no valid checkpoint of run {cfg['name']!r} in {where}")


def _hooks(args, run, monitors: list[dict]) -> list:
    """The hooks of ``monitors`` (tables), plus a report per epoch unless ``--quiet`` or the run file has one:
    ``progress``'s bars where installed (sigmann-monitors), else the core's plain ``epoch_lines``."""
    from sigma_core import plugins
    from sigma_core.hooks.tables import hooks_from_tables

    specs = list(monitors)
    reports = {"progress", "epoch_lines"}
    if not args.quiet and not reports & ({hook.name for hook in run.hooks} | {s["type"] for s in specs}):
        installed = {c.name for c in plugins.components("hook")}
        specs.insert(0, {"type": "progress" if "progress" in installed else "epoch_lines"})
    return hooks_from_tables(specs, where="--monitor")


def _train_guarded(run, hooks) -> tuple[dict, int]:
    """Train holding this run's lock in every checkpoint directory it saves in; then save, and say in one line
    what ended the run, where it saved and how to resume. Returns the summary and the exit status. The first Ctrl-C
    or SIGTERM stops the run at the next iteration boundary (:class:`StopOnSignal`), the second aborts at once
    (writes are atomic: files stay whole)."""
    import numpy

    from sigma_core.training.checkpoint import run_lock
    from sigma_core.hooks.checkpoints import CheckpointHook, checkpoint_now

    folders = [hook.directory for hook in run.hooks if isinstance(hook, CheckpointHook)]
    with contextlib.ExitStack() as locks:
        for directory in dict.fromkeys(folders or [run.directory / "checkpoints"]):
            locks.enter_context(run_lock(directory, run.trainer.name))
        with numpy.errstate(all="ignore"):  # an overflow is reported by the non-finite checks, in one line
            summary = run.train([*hooks, StopOnSignal()])
        loop, trainer, stopped = run.loop, run.trainer, run.loop.stopped
        where = (f"after training step {trainer.total_iterations} (" + (
            f"epoch {trainer.epoch + 1} of {loop.epochs}, iteration {trainer.iteration}" if trainer.in_epoch
            else f"{trainer.epoch} of {loop.epochs} epochs done") + ")")
        what, status = ("finished", 0) if stopped is None else (f"stopped by {stopped.reason}", stopped.status)
        try:
            path = checkpoint_now(loop)
        except SigmaError as error:  # a full disk, a non-finite parameter: the run's result still counts
            print(f"{what} {where}; nothing saved: {one_line(error)}", file=sys.stderr)
            return summary, status
    if stopped is None:  # to train on, it needs more epochs
        then = f"train on with: {loop.resume_command(path, [f'training.epochs={loop.epochs + run.epochs}'])}"
    else:
        then = f"resume with: {loop.resume_command(path)}"
    print(f"{what} {where}; saved {path}; {then}", file=sys.stderr)
    return summary, status


#: The signals that stop a run (so named in its stop line; exit status 128 + the number), and how long the run may
#: take to reach its next boundary before the inline hook holding it there is interrupted, named and detached.
STOPPERS, GRACE_SECONDS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}, 1.0


class StopOnSignal(Hook):
    """Turns Ctrl-C or SIGTERM (what schedulers and ``docker stop`` send) into a stop at the next iteration
    boundary, exit status 130 or 143; after :data:`GRACE_SECONDS` an inline hook still holding the run is interrupted
    every :data:`GRACE_SECONDS` until it lets go. A second signal aborts at once."""

    name, previous = "ctrl-c", {}
    order = -1_000_000  # attached first: from then on Ctrl-C stops the run, and a KeyboardInterrupt is a hook's own

    def attach(self, run):
        super().attach(run)
        if threading.current_thread() is threading.main_thread():  # only there can signals be caught
            self.previous = {number: signal.signal(number, self.interrupt) for number in (*STOPPERS, signal.SIGALRM)}
            signal.signal(signal.SIGALRM, self.interrupt_hook)

    def interrupt(self, number, frame):
        for stopper in STOPPERS:
            signal.signal(stopper, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, GRACE_SECONDS, GRACE_SECONDS)
        # From another thread: this handler may run while the training thread holds the loop's lock.
        threading.Thread(target=self.run.loop.signal_stop, args=(STOPPERS[number], 128 + number), daemon=True).start()

    def interrupt_hook(self, number, frame):
        if self.run.loop.dispatcher.calling is not None:  # else the run is on its way to the boundary, or past it
            raise TimeoutError(f"it held the run up {GRACE_SECONDS} s after {self.run.loop.stopped.reason}")

    def detach(self):
        signal.setitimer(signal.ITIMER_REAL, 0)
        for number, previous in self.previous.items():
            signal.signal(number, previous)

"""sigmann-replay's registrations: the ``replay`` step compiler, the ``explain`` hook and command.

Every ``sigma`` command builds its parser through :func:`register_commands`, so this module imports
nothing heavy: the recording code loads when a run or ``sigma explain`` needs it.
"""

from sigma_core import hookimpl


@hookimpl
def register_compilers(register):
    register("replay", "sigmann_replay.replay:StepReplay.compile", rank=10,
             description="recorded training steps: each signature's kernel calls replayed on their buffers")


@hookimpl
def register_hooks(register):
    register("explain", "sigmann_replay.explain:ExplainOnce",
             description="prints the recorded training step once (stderr), as sigma explain does")


@hookimpl
def register_commands(cli):
    """``sigma explain``, and ``--explain`` on ``sigma train``: short for ``--monitor explain``."""
    from sigma_core import cli_options  # the sigma command's own (imported, as this function runs only there)

    parser = cli.add_parser(
        "explain", parents=[cli_options.DEBUG, cli_options.HANDLER],
        help="the recorded training step: kernels, buffers, bytes, FLOPs",
        description="Run two training steps of a run file on its first batches and print the recorded step: every "
                    "kernel call, its shapes, the buffers it reads and writes, the bytes they hold and its FLOPs.")
    parser.add_argument("config", help="run file (TOML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a run-file key first (repeatable)")
    parser.set_defaults(run=_explain)
    train = cli.choices.get("train")  # absent from the scratch parser on which Sigma lists a plugin's own commands
    if train is not None:
        train.add_argument(
            "--explain", dest="monitors", action="append_const", const="explain",
            help="print the recorded training step once it is recorded, as `sigma explain` does (stderr); "
                 "the same as --monitor explain")


def _explain(args) -> int:
    from sigmann_replay.explain import run_explain

    return run_explain(args)

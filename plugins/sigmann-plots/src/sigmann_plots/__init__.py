"""``sigma plot`` and the ``plots`` hook (see :mod:`sigmann_plots.plot` and :mod:`sigmann_plots.hook`).

Building the ``sigma`` parser and discovering plugins import nothing heavy:
matplotlib loads only when a plot is drawn.
"""

from __future__ import annotations

from sigma_core import hookimpl


@hookimpl
def register_commands(cli):
    parser = cli.add_parser(
        "plot",
        help="draw cost, validation accuracy and learning rate of runs as a PNG",
        description="Draw the curves of one or more runs (the directories the metrics hook wrote, "
        "e.g. runs/digits/version_0) into one PNG, overlaid with a legend. A folder of versions "
        "(runs/digits) stands for each of its versions.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="a run directory holding metrics.jsonl, or a folder of them (runs/<name>)")
    parser.add_argument("-o", "--output", metavar="PNG",
                        help="where to write (default: RUN_DIR/metrics.png for one run directory given, "
                        "plot.png for several)")
    parser.set_defaults(run=run_plot)


@hookimpl
def register_hooks(register):
    register("plots", "sigmann_plots.hook:PlotsHook",
             description="redraws metrics.png (cost, accuracy, learning rate) in the run directory every epoch")


def run_plot(args) -> int:
    import sys
    from pathlib import Path

    from sigma_core import check_writable
    from sigmann_monitors import run_directories, run_label
    from sigmann_plots.plot import draw, read_run

    runs = {}
    for given in args.runs:  # a version trained without the metrics hook is named, not left out silently
        bare = [str(version) for version in sorted(Path(given).glob("version_*"))
                if version.is_dir() and not (version / "metrics.jsonl").exists()]
        if bare:
            print(f"sigma plot: left out, no metrics.jsonl (trained without the metrics hook): {', '.join(bare)}",
                  file=sys.stderr)
    for directory in (run for given in args.runs for run in run_directories(given)):
        label = run_label(directory)
        runs[str(directory) if label in runs else label] = read_run(directory)
    output = Path(args.output or (Path(args.runs[0]) / "metrics.png" if len(args.runs) == 1 else "plot.png"))
    check_writable(output, what="-o" if args.output else "")  # before matplotlib loads and draws
    draw(runs, output)
    print(f"wrote {output}")
    return 0

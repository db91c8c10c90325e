"""The ``web`` hook and ``sigma dashboard``: Sigma's runs in the browser, watched and steered.

Discovery imports nothing heavy: Starlette and uvicorn load when a dashboard starts.
"""

from __future__ import annotations

from sigma_core import hookimpl


@hookimpl
def register_hooks(register):
    register("web", "sigmann_web.hook:WebHook",
             description="a live dashboard in the browser: charts, controls, settings, draw-a-digit")


@hookimpl
def register_commands(cli):
    from sigma_core import cli_options  # the sigma command's own (imported here: this hook runs only there)

    parser = cli.add_parser(
        "dashboard",
        help="show finished runs' metrics in the browser (read-only)",
        description="Serve the dashboard for run directories the metrics hook wrote (e.g. runs/digits/version_0; "
        "runs/digits: each of its versions), one tab each, read-only, until Ctrl-C.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="a run directory holding metrics.jsonl, or a folder of them (runs/<name>)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=cli_options.ranged("int in [0, 65535]"), default=0,
                        help="port (default: a free one, printed)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")
    parser.set_defaults(run=run_dashboard)


def run_dashboard(args) -> int:
    import sys
    import webbrowser

    from sigmann_monitors import run_directories
    from sigmann_web.board import board_from_files
    from sigmann_web.server import Server

    boards = [board_from_files(run) for given in args.runs for run in run_directories(given)]
    server = Server(args.host, args.port)
    for board in boards:
        server.add(board)
    url = server.url(with_token=False)

    def announce():
        print(f"sigma web: dashboard of {', '.join(b.name for b in boards)} at {url} (read-only; Ctrl-C to stop)",
              file=sys.stderr, flush=True)
        if args.open:
            webbrowser.open(url)

    server.serve(ready=announce)
    return 0

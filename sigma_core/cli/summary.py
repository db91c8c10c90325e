"""``sigma summary``: the network a run file describes, layer by layer, without reading its data."""

from __future__ import annotations

from . import options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "summary", parents=[options.DEBUG], help="the network a run file describes: layers, shapes, parameters",
        description="Print each layer's name, type, output shape and parameter count, and the total.")
    parser.add_argument("config", help="run file (TOML)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a run-file key first (repeatable)")
    parser.set_defaults(run=run_summary)


def run_summary(args) -> int:
    from sigma_core import config
    from sigma_core.architecture import from_layer_list
    from sigma_core.network import Network

    cfg = config.load(args.config, args.overrides)
    print(Network(from_layer_list(cfg["network"]["layers"]), name=cfg["name"]).summary())
    return 0

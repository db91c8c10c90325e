"""``sigma summary``: the network a run file, a checkpoint or an export describes, layer by layer, without reading
its data."""

from pathlib import Path

from sigma_core.cli import options


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "summary", parents=[options.SET, options.DEBUG],
        help="the network a run file describes: layers, shapes, parameters",
        description="Print each layer's name, type, output shape and parameter count, and the total: of the network "
        "a run file (TOML) describes, or one a checkpoint (.ckpt) or export (.safetensors) holds, with the preprocess "
        "transforms its raw inputs go through.")
    parser.add_argument("config", help="run file (TOML), checkpoint (.ckpt) or export (.safetensors)")
    return parser


def main(args) -> int:
    from sigma_core import config, plugins
    from sigma_core.model.architecture import from_layer_list
    from sigma_core.errors import SigmaError
    from sigma_core.model.network import Network

    saved_suffixes = {".ckpt", *(f".{c.name}" for c in plugins.components("loader"))}  # a checkpoint or an export
    if Path(args.config).suffix not in saved_suffixes:
        cfg = config.load(args.config, args.overrides)
        print(Network(from_layer_list(cfg["network"]["layers"]), name=cfg["name"]).summary())
        return 0
    from sigma_core.model.inference import read_saved  # checkpoints: only when one is read

    if args.overrides:
        raise SigmaError(f"--set changes a run file; {args.config} is a saved network")
    saved = read_saved(args.config)
    try:
        print(Network(from_layer_list(saved.layers), name=saved.name).summary())
    except SigmaError as error:  # the layer list a file holds: name the file
        raise SigmaError(f"{args.config}: {error}") from None
    transforms = ", ".join(name for table in saved.preprocess for name in table)
    print(f"raw inputs go through its preprocess transforms, as fitted in training: {transforms or 'none'}")
    return 0

"""``sigma summary``: the network a run file, a checkpoint (or a run folder's newest) or an export describes, layer
by layer, without reading its data; of a checkpoint also the preprocessing fitted, the epochs and the accuracy."""

import json
from pathlib import Path

from sigma_core import cli_options as options


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "summary", parents=[options.SET, options.DEBUG],
        help="the network a run file describes: layers, shapes, parameters",
        description="Print each layer's name, type, output shape and parameter count, and the total: of the network "
        "a run file (TOML) describes, or one a checkpoint (.ckpt; a run folder: its newest) or export (.safetensors) "
        "holds, with the preprocess transforms as fitted and, of a checkpoint, the epochs and accuracy.")
    parser.add_argument("config", help="run file (TOML), checkpoint (.ckpt), run folder or export (.safetensors)")
    return parser


def main(args) -> int:
    from sigma_core import (Network, SigmaError, components, from_layer_list, load_checkpoint, load_run_file,
                            read_saved)

    path = Path(args.config)  # a folder (runs/<name>/version_N): the newest checkpoint in it or below
    if path.is_dir() and (path := max(path.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime, default=path)).is_dir():
        raise SigmaError(f"{args.config}: no checkpoint in this folder or below it")
    saved_suffixes = {".ckpt", *(f".{c.name}" for c in components("loader"))}  # a checkpoint or an export
    if path.suffix not in saved_suffixes:
        cfg = load_run_file(args.config, args.overrides)
        print(Network(from_layer_list(cfg["network"]["layers"]), name=cfg["name"]).summary())
        return 0
    if args.overrides:
        raise SigmaError(f"--set changes a run file; {path} is a saved network")
    saved = read_saved(path)
    try:
        print(Network(from_layer_list(saved.layers), name=saved.name).summary())
    except SigmaError as error:  # the layer list a file holds: name the file
        raise SigmaError(f"{path}: {error}") from None
    fitted = "; ".join(f"{name} {(text := json.dumps(values))[:200]}{'...' * (len(text) > 200)}"  # per-feature
                       for table in saved.preprocess for name, values in table.items())  # statistics run long
    print(f"raw inputs go through its preprocess transforms, as fitted in training: {fitted or 'none'}")
    if path.suffix == ".ckpt":
        print(trained(load_checkpoint(path)))
    return 0


def trained(checkpoint) -> str:
    """The epochs a checkpoint holds, and the held-out accuracy its run's metrics file (if any) had then."""
    epoch, folder = checkpoint.trainer["epoch"], checkpoint.metadata["directory"]  # folder None: saved from code
    metrics = Path(folder, "metrics.jsonl") if folder else None
    lines = metrics.read_text(errors="replace").splitlines() if metrics and metrics.is_file() else []
    scores = [f"{key} {value:.2%}" for record in map(json.loads, (line for line in lines if line.endswith("}")))
              if record.get("event") == "epoch" and record.get("epoch") == epoch  # not a line a crash cut short
              for key, value in record.items() if key.endswith("accuracy")]
    then = f"; then {scores[-1]} ({metrics})" if scores else ""
    return f"{checkpoint.path}: {epoch} epoch{'s' * (epoch != 1)} trained{then}"

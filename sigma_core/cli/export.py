"""``sigma export``: a checkpoint's network as a portable file of weights and architecture."""

from __future__ import annotations

from pathlib import Path

from . import options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export", parents=[options.DEBUG], help="export a checkpoint's network (safetensors, ONNX)",
        description="Write a checkpoint's parameters as safetensors, with the layer list as JSON metadata "
        "(sigma predict and sigma_core.load read it back), or its inference graph as ONNX (input 'inputs', "
        "outputs 'predictions' and, for softmax_ce, 'probabilities'), for networks of dense, elementwise, dropout, "
        "concatenate and add layers: an unsupported layer is an error that lists those that export.")
    parser.add_argument("checkpoint", help="checkpoint file (.ckpt)")
    parser.add_argument("--format", choices=("safetensors", "onnx"), default="safetensors")
    parser.add_argument("--out", metavar="FILE", help="where to write (default: the checkpoint's name, new suffix)")
    parser.set_defaults(run=run_export)


def run_export(args) -> int:
    from sigma_core.checkpoint import load_checkpoint
    from sigma_core.inference import export_onnx, export_safetensors

    out = Path(args.out or Path(args.checkpoint).with_suffix(f".{args.format}"))
    if args.format == "onnx":
        export_onnx(args.checkpoint, out)
    else:
        export_safetensors(load_checkpoint(args.checkpoint), out)
    print(out)
    return 0

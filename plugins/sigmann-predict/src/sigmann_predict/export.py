"""``sigma export``: a checkpoint's network as a portable file, in a format from the exporter table.

``safetensors`` (weights, with the layer list as metadata) is built in; ``onnx`` comes from ``sigmann-onnx``; any
plugin may register another (:func:`sigma_core.hookspecs.register_exporters`).
"""

from pathlib import Path

from sigma_core import cli_options as options


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "export", parents=[options.DEBUG], help="export a checkpoint's network (safetensors, ONNX, ...)",
        description="Write a checkpoint's parameters as safetensors, with the layer list as JSON metadata "
        "(sigma predict and sigma_core.load read it back), or, with sigmann-onnx, its inference graph as ONNX "
        "(input 'inputs', outputs 'predictions' and, for softmax_ce, 'probabilities'): a layer that does not export "
        "is an error that lists those that do. Plugins may add formats.")
    parser.add_argument("checkpoint", help="checkpoint file (.ckpt)")
    parser.add_argument("--format", default="safetensors",
                        help="safetensors (default), onnx (with sigmann-onnx), or another installed exporter")
    parser.add_argument("--out", metavar="FILE", help="where to write (default: the checkpoint's name, new suffix)")
    return parser


def main(args) -> int:
    from sigma_core import MORE_PLUGINS, SigmaError, check_writable, components

    formats = {c.name: c for c in components("exporter") if "/" not in c.name}  # "onnx/dense": a layer's
    if args.format not in formats:
        installed = ", ".join(sorted(formats))
        raise SigmaError(f"sigma export: unknown format {args.format!r} (installed: {installed}); {MORE_PLUGINS}")
    out = check_writable(args.out or Path(args.checkpoint).with_suffix(f".{args.format}"),
                         what="--out" if args.out else "")  # before the checkpoint is read
    formats[args.format].load()(args.checkpoint, out)
    print(out)
    return 0

"""``sigma predict``: a trained network's class, probabilities and top-k for new inputs."""

import csv
import json
import logging
import sys
from pathlib import Path

from sigma_core import SigmaError, cli_options as options

log = logging.getLogger("sigma")

#: Bytes of JSON text a parsed number may take in memory at most, as Python objects before NumPy packs them.
JSON_EXPANSION = 16


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "predict", parents=[options.HANDLER, options.DEBUG], help="predict with a checkpoint or an exported network",
        description="Run the network of a checkpoint (or a .safetensors export) on raw inputs, as the run's data "
        "source gives them (its preprocess transforms, with the statistics fitted in training, apply first): "
        "a .npy file, an .npz file (its array 'inputs', or its only one), a CSV file of numbers, or - for JSON rows on "
        "stdin (one array of rows, or one row per line); or any file a plugin reads, by suffix (sigmann-images: .png, "
        ".jpg, ... one record each, fitted to the input's shape; sigmann-mnist: IDX files).")
    parser.add_argument("checkpoint", help="checkpoint (.ckpt) or export (.safetensors)")
    parser.add_argument("inputs", nargs="+", help="input files (their records in order), or - for JSON on stdin")
    parser.add_argument("--format", choices=("csv", "json"), default="csv",
                        help="how to print predictions (default csv)")
    parser.add_argument("--top", type=options.ranged("int >= 1"), default=3, metavar="K",
                        help="how many best classes to list (default 3)")
    parser.add_argument("--out", metavar="FILE.npy", help="write the probabilities as a .npy array instead of printing")
    parser.add_argument("--columns", default="0--1", help="the CSV columns holding the inputs (default all), e.g. 0-63")
    parser.add_argument("--batch-size", type=options.ranged("int >= 1"), default=1000,
                        help="records per forward pass (default 1000)")
    return parser


def main(args) -> int:
    import numpy

    from sigma_core import atomic_write, check_writable, load

    from .probabilities import class_probabilities

    if args.out:
        check_writable(args.out, what="--out")  # before any work
    try:
        network = load(args.checkpoint, args.handler, dtype=args.dtype)
    except SigmaError as error:  # a layer's (too big for this machine's memory): which file it is in, too
        raise error if str(args.checkpoint) in str(error) else SigmaError(f"{args.checkpoint}: {error}") from None
    inputs = [read_inputs(source, args.columns, network) for source in args.inputs]
    if len({part.shape[1:] for part in inputs}) > 1:
        raise SigmaError(f"the inputs have different record shapes: {', '.join(str(p.shape[1:]) for p in inputs)}")
    warn_if_out_of_range(numpy.concatenate(inputs), network.preprocessing)
    probabilities = class_probabilities(network, network.predict(numpy.concatenate(inputs), batch_size=args.batch_size))
    if args.out:
        with atomic_write(args.out, what="--out") as stream:
            numpy.save(stream, probabilities)
        return 0
    probabilities = probabilities.reshape(len(probabilities), -1)
    # one output is a binary classifier (as in evaluation): class 1 above 0.5
    scores = numpy.hstack([1 - probabilities, probabilities]) if probabilities.shape[1] == 1 else probabilities
    top = numpy.argsort(-scores, axis=1, kind="stable")[:, :args.top]
    if args.format == "json":
        for p, score, best in zip(probabilities, scores, top):
            print(json.dumps({"class": int(best[0]), "probabilities": p.tolist(),
                              "top": [{"class": int(c), "probability": float(score[c])} for c in best]}))
        return 0
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["class", *(f"p{i}" for i in range(probabilities.shape[1])),
                     *(f"top{k + 1}" for k in range(top.shape[1]))])
    for p, best in zip(probabilities, top):
        writer.writerow([int(best[0]), *(f"{v:.6g}" for v in p), *map(int, best)])
    return 0


def warn_if_out_of_range(inputs, preprocessing) -> None:
    """One warning line where the raw inputs lie far outside the range the network's ``normalise`` was fitted on
    (0..255 pixels into a network fitted on 0..16): its predictions would come with confidence and no meaning."""
    import numpy

    fitted = next((table["normalise"]["input_range"] for table in (preprocessing.fitted() if preprocessing else [])
                   if isinstance(table.get("normalise"), dict) and "input_range" in table["normalise"]), None)
    if fitted is None or not len(inputs):
        return
    low, high = float(numpy.min(fitted)), float(numpy.max(fitted))  # per feature: the widest
    seen, margin = (float(inputs.min()), float(inputs.max())), high - low  # "far": by more than the range itself
    if seen[0] < low - margin or seen[1] > high + margin:
        log.warning("the inputs range over %g..%g, far outside %g..%g, the range the network's preprocessing was "
                    "fitted on: its predictions mean little (scaled differently from training?)", *seen, low, high)


def read_inputs(source: str, columns: str, network):
    """The raw input records of ``source`` as a NumPy array, none of them empty: stdin's JSON rows (``-``), the
    core's plain files, or a registered reader's."""
    import numpy

    from sigma_core import load_numpy
    from sigmann_csv import read_csv

    path = Path(source)
    if source == "-":
        array = numpy.atleast_2d(json_rows(getattr(sys.stdin, "buffer", sys.stdin)))  # a test's StringIO has none
    elif path.suffix in (".npy", ".npz"):
        dataset = load_numpy(path)
        names = dataset.section_names
        if "inputs" not in names and len(names) != 1:
            raise SigmaError(f"{path}: no array 'inputs' among {', '.join(names)}")
        array = dataset.section("inputs" if "inputs" in names else names[0])
    elif path.suffix == ".csv":
        chunks = [chunk["inputs"] for chunk in read_csv(path, {"inputs": columns})]
        array = numpy.concatenate(chunks) if chunks else numpy.empty((0,))
    else:
        array = _reader(path)(path, network=network)
    if array.size == 0:  # not the input layer's shape error for a (0,) or (1, 0) array
        raise SigmaError(f"{'stdin' if source == '-' else source}: empty: no input values in it")
    return array


def json_rows(stream, chunk: int = 1 << 16):
    """The JSON rows in ``stream``, binary or text (one array of rows, or one row per line), as a float64 array.

    Everything that is not rows of finite numbers is one :class:`SigmaError`: a NUL byte (``/dev/zero`` piped
    in, refused at once instead of read forever), more text than memory holds once parsed, nesting too deep
    for the parser, strings, booleans or objects where numbers belong (never converted), NaN or infinity.
    """
    import numpy

    from sigma_core import available_memory

    limit, text = available_memory() // JSON_EXPANSION, bytearray()
    while data := stream.read(chunk):
        start = len(text)
        text += data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        if (nul := text.find(b"\0", start)) >= 0:
            raise SigmaError(f"stdin: not JSON rows of numbers (a NUL byte at offset {nul:,})")
        if len(text) > limit:
            raise SigmaError(f"stdin: more than {limit:,} bytes of JSON, more than memory holds once parsed; "
                             "give large inputs as a .npy file")
    try:
        try:
            rows = json.loads(text)
        except ValueError:  # JSON lines: one row each
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        pending = [rows]
        while pending:  # without recursion: a parsed document may be as deep as the parser allowed
            item = pending.pop()
            if isinstance(item, list):
                pending.extend(item)
            elif isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ValueError(f"{json.dumps(item)[:40]} is not a number")
        array = numpy.asarray(rows, dtype=numpy.float64)
    except RecursionError:
        raise SigmaError("stdin: not JSON rows of numbers (nested too deeply)") from None
    except (ValueError, OverflowError) as error:  # not JSON, nor UTF-8; not numbers; ragged; past float64's range
        raise SigmaError(f"stdin: not JSON rows of numbers ({error})") from None
    if not numpy.isfinite(array).all():
        raise SigmaError("stdin: not JSON rows of finite numbers (NaN or infinity; 1e999 reads as infinity)")
    return array


def _reader(path: Path):
    """The reader registered for ``path``: by its suffix, or for a name without one its last ``-`` part
    (``t10k-images-idx3-ubyte``: ``ubyte``)."""
    from sigma_core import MORE_PLUGINS, UnknownComponentError, components, get_component

    name = path.name.lower()
    key = name.rpartition(".")[2] if "." in name else name.rpartition("-")[2]
    try:
        component = get_component("reader", key)
    except UnknownComponentError:
        readers = sorted(n for c in components("reader") for n in (c.name, *c.aliases))
        raise SigmaError(f"{path}: unknown input format {key!r} (sigma predict reads .npy, .npz, .csv, - for JSON on "
                         f"stdin{''.join(', .' + n for n in readers)}); {MORE_PLUGINS}") from None
    available, reason = component.availability()
    if not available:
        raise SigmaError(f"{path}: the {component.name!r} reader of {component.distribution} cannot run here: {reason}")
    return component.load()

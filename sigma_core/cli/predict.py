"""``sigma predict``: a trained network's class, probabilities and top-k for new inputs."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

from sigma_core.errors import SigmaError

from . import options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "predict", parents=[options.HANDLER, options.DEBUG], help="predict with a checkpoint or an exported network",
        description="Run the network of a checkpoint (or a .safetensors export) on inputs as it saw them in training "
        "(preprocessed alike): a .npy file, an .npz file (its array 'inputs', or its only one), a CSV file of numbers, "
        "an IDX file (.gz too), or - for JSON rows on stdin (one array of rows, or one row per line); or image files "
        "(.png, .jpg, ...: one record each, needs Pillow), fitted to the input's shape and preprocessed as the run's data.")
    parser.add_argument("checkpoint", help="checkpoint (.ckpt) or export (.safetensors)")
    parser.add_argument("inputs", nargs="+", help="input files (their records in order), or - for JSON on stdin")
    parser.add_argument("--format", choices=("csv", "json"), default="csv", help="how to print predictions (default csv)")
    parser.add_argument("--top", type=int, default=3, metavar="K", help="how many best classes to list (default 3)")
    parser.add_argument("--out", metavar="FILE.npy", help="write the probabilities as a .npy array instead of printing")
    parser.add_argument("--columns", default="0--1", help="the CSV columns holding the inputs (default all), e.g. 0-63")
    parser.add_argument("--batch-size", type=int, default=1000, help="records per forward pass (default 1000)")
    parser.set_defaults(run=run_predict)


def run_predict(args) -> int:
    import numpy

    from sigma_core.atomic import atomic_write
    from sigma_core.inference import class_probabilities, load

    network = load(args.checkpoint, args.handler, dtype=args.dtype)
    images = [source for source in args.inputs if Path(source).suffix.lower() in IMAGE_SUFFIXES]
    pixels = dict(zip(images, read_images(images, network, args.checkpoint))) if images else {}
    inputs = [pixels[source][None] if source in pixels else read_inputs(source, args.columns) for source in args.inputs]
    if len({part.shape[1:] for part in inputs}) > 1:
        raise SigmaError(f"the inputs have different record shapes: {', '.join(str(p.shape[1:]) for p in inputs)}")
    inputs = numpy.concatenate(inputs)
    probabilities = class_probabilities(network, network.predict(inputs, batch_size=max(args.batch_size, 1)))
    if args.out:
        with atomic_write(args.out) as stream:
            numpy.save(stream, probabilities)
        return 0
    probabilities = probabilities.reshape(len(probabilities), -1)
    # one output is a binary classifier (as in evaluation): class 1 above 0.5
    scores = numpy.hstack([1 - probabilities, probabilities]) if probabilities.shape[1] == 1 else probabilities
    top = numpy.argsort(-scores, axis=1, kind="stable")[:, :max(args.top, 1)]
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


def read_inputs(source: str, columns: str):
    """The input records of ``source`` as a NumPy array, with the core's plain-file extractors."""
    import numpy

    from sigma_core.data import load_numpy, read_csv, read_idx

    if source == "-":
        text = sys.stdin.read()
        try:
            try:
                rows = json.loads(text)
            except ValueError:  # JSON lines: one row each
                rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            array = numpy.asarray(rows, dtype=numpy.float64)
        except ValueError as error:
            raise SigmaError(f"stdin: not JSON rows of numbers ({error})") from None
        return array[None] if array.ndim == 1 else array
    path = Path(source)
    if path.suffix in (".npy", ".npz"):
        dataset = load_numpy(path)
        names = dataset.section_names
        if "inputs" not in names and len(names) != 1:
            raise SigmaError(f"{path}: no array 'inputs' among {', '.join(names)}")
        return dataset.section("inputs" if "inputs" in names else names[0])
    if path.suffix == ".csv" or path.suffixes[-2:] == [".csv", ".gz"]:
        chunks = [chunk["inputs"] for chunk in read_csv(path, {"inputs": columns})]
        return numpy.concatenate(chunks) if chunks else numpy.empty((0,))
    if "idx" in path.name or path.suffix in (".gz", ".ubyte"):
        return read_idx(path)
    raise SigmaError(f"{path}: unknown input format (use .npy, .npz, .csv, an IDX file, images, or - for JSON on stdin)")


def read_images(paths, network, saved):
    """One record per image, converted and resized to the network's input: (pixels,) of a square greyscale
    image, (height, width) greyscale, or (height, width, 1 | 3 | 4) channels; then the run's preprocessing."""
    import numpy

    from sigma_core.data import Dataset
    from sigma_core.data.config import _steps
    from sigma_core.inference import saved_preprocess

    try:
        from PIL import Image
    except ImportError:
        raise SigmaError("reading images needs Pillow: pip install 'sigmann[images]'") from None
    shape = next(layer.output_shape for layer in network.layers.values() if not layer.input_shapes)
    side = math.isqrt(shape[0])
    height, width, mode = {1: (side, side, "L"), 2: (*shape, "L")}.get(len(shape), (*shape[:2], _MODES.get(shape[-1])))
    if mode is None or height * width * len(mode) != math.prod(shape):
        raise SigmaError(f"{paths[0]}: images need a network input of (pixels of a square,), (height, width) or "
                         f"(height, width, 1 | 3 | 4 channels); this network takes {shape}")
    arrays = []
    for path in paths:
        try:
            with Image.open(path) as image:
                arrays.append(numpy.asarray(image.convert(mode).resize((width, height)), numpy.float64).reshape(shape))
        except OSError as error:
            raise SigmaError(f"{path}: cannot read it as an image ({error})") from None
    dataset = Dataset({"inputs": numpy.stack(arrays)}, "images")
    for step in _steps(saved_preprocess(saved)):
        if step.statistics is not None:
            raise SigmaError(f"{paths[0]}: the run's preprocess step {step.name!r} was fitted to its training data, which "
                             "the checkpoint does not hold; give normalise an input_range, or predict on arrays")
        dataset = dataset if step.name == "shuffle" else step.apply(dataset)
    return dataset.section("inputs")


IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm", ".ppm"}
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}

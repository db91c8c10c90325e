"""Using a trained network: load one from a checkpoint or a safetensors export, predict, export.

Either file holds the run's layer list (a checkpoint in its run config, an export as JSON metadata) and its
``preprocess`` transforms with their fitted statistics, so a loaded network needs no run file and predicts
from raw inputs. The safetensors export is here because :func:`load` reads it; other formats are plugins'.
"""

import json
from pathlib import Path
from typing import NamedTuple

import numpy

from .atomic import atomic_write
from .checkpoint import load_checkpoint
from .config import require
from .data.preprocessing import Preprocessing
from .errors import ConfigError, SigmaError
from .reading import check_readable


class Saved(NamedTuple):
    """What a checkpoint or an export holds of a trained network."""

    name: str
    layers: list  # the run file's network.layers
    dtype: str
    parameters: dict  # parameter id -> NumPy array
    preprocess: list  # the run's preprocess transforms, statistics fitted (an older Sigma's file: as written)


def read_saved(path) -> Saved:
    """The network saved in ``path``, a ``.ckpt`` checkpoint or a ``.safetensors`` export, unbuilt."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    checkpoint = load_checkpoint(path)
    if checkpoint.config is None:
        raise SigmaError(f"checkpoint {path}: saved from code without a run config, so it holds no architecture; "
                         "build the Network in code and call network.load_state_dict(checkpoint.parameters)")
    fitted = checkpoint.metadata["preprocess"]  # None from an older Sigma: its run file's transforms, as written
    preprocess = checkpoint.config.get("data", {}).get("preprocess", []) if fitted is None else fitted
    return Saved(checkpoint.config["name"], checkpoint.config["network"]["layers"],
                 checkpoint.metadata["handler"]["dtype"], checkpoint.parameters, preprocess)


def load(path, handler=None, *, dtype: str | None = None):
    """The network saved in ``path`` (a ``.ckpt`` checkpoint or a ``.safetensors`` export), ready to
    :meth:`~sigma_core.network.Network.predict` raw inputs (its run's fitted preprocessing applies first) on
    ``handler`` (an object, a name, or None: ``SIGMA_HANDLER`` or the fastest available) in ``dtype``
    (default: the one it was saved in)."""
    from . import backend
    from .architecture import from_layer_list
    from .network import Network

    path = Path(path)
    saved = read_saved(path)
    preprocessing = Preprocessing(saved.preprocess)
    if preprocessing.adaptive:  # a file written before Sigma kept the fitted statistics
        raise SigmaError(f"{path}: its run's preprocess transform {preprocessing.adaptive[0]!r} takes statistics from "
                         "the training data, which this file (written by an older Sigma) does not hold; train again")
    if handler is None or isinstance(handler, str):
        handler_name, source = backend.resolve_handler_name(cli=handler)
        handler = backend.create_handler(handler_name, dtype=dtype or saved.dtype, seed=0, source=source)
    try:
        network = Network(from_layer_list(saved.layers), name=saved.name)
    except SigmaError as error:  # the layer list a file holds: name the file
        raise SigmaError(f"{path}: {error}") from None
    network.initialise(handler)
    try:
        network.load_state_dict(saved.parameters)
    except SigmaError as error:
        raise SigmaError(f"{path}: the parameters do not fit its architecture ({error})") from None
    network.preprocessing = preprocessing if saved.preprocess else None
    return network


def class_probabilities(network, predictions: numpy.ndarray) -> numpy.ndarray:
    """Per-class probabilities: the softmax of a softmax cross-entropy network's logits; other outputs as they are."""
    if not any(type(layer).__name__ == "SoftmaxCrossEntropy" for layer in network.layers.values()):
        return predictions
    shifted = numpy.exp(predictions - predictions.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def export_safetensors(source, path) -> Path:
    """Write the parameters of the checkpoint ``source`` to ``path``, with its name, dtype, layer list and fitted
    preprocess transforms as metadata (the built-in ``safetensors`` exporter of ``sigma export``)."""
    save = _safetensors(path).numpy.save
    saved = read_saved(source)
    metadata = {"format": "sigma-network", "name": saved.name, "dtype": saved.dtype, "layers": json.dumps(saved.layers),
                "preprocess": json.dumps(saved.preprocess)}
    data = save({pid: numpy.asarray(a, order="C") for pid, a in saved.parameters.items()}, metadata)
    with atomic_write(path) as stream:
        stream.write(data)
    return Path(path)


def _safetensors(path):
    """The ``safetensors`` package (an optional dependency), or one line naming ``path`` and how to install it."""
    try:
        import safetensors.numpy
    except ImportError:
        message = f"{path}: safetensors files need the safetensors package: pip install 'sigmann[export]'"
        raise SigmaError(message) from None
    return safetensors


def _read_safetensors(path: Path) -> Saved:
    check_readable(path, SigmaError, "export")
    safetensors = _safetensors(path)
    try:
        with safetensors.safe_open(str(path), framework="numpy") as stream:
            metadata = stream.metadata() or {}
        if metadata.get("format") != "sigma-network":
            raise SigmaError(f"{path}: not a network exported by `sigma export` (no sigma-network metadata)")
        layers, preprocess = json.loads(metadata["layers"]), json.loads(metadata.get("preprocess", "[]"))
        require("layers", ["table"], layers)
        require("dtype", ("float32", "float64"), metadata["dtype"])
        Preprocessing(preprocess)  # the rules of a run file's
        parameters = safetensors.numpy.load_file(str(path))
        return Saved(metadata["name"], layers, metadata["dtype"], parameters, preprocess)
    except (OSError, safetensors.SafetensorError, ConfigError, KeyError, ValueError, RecursionError) as error:  # JSON
        raise SigmaError(f"{path}: cannot read it as a safetensors export ({error})") from None

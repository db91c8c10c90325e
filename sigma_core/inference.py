"""Using a trained network: load one from a checkpoint or an exported file, predict, export to safetensors.

A checkpoint holds the run config, so the architecture is rebuilt from its
``network.layers``; an exported ``.safetensors`` file carries the same layer
list as JSON metadata beside the weights, so it needs no run file either. The
safetensors export stays here because :func:`load` reads it back; other
formats are plugins' exporters (``sigmann-onnx``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy

from .config import require
from .errors import ConfigError, SigmaError
from .reading import check_readable


def load(path, handler=None, *, dtype: str | None = None):
    """The network saved in ``path`` (a ``.ckpt`` checkpoint or a ``.safetensors`` export), ready to
    :meth:`~sigma_core.network.Network.predict` on ``handler`` (an object, a name, or None: ``SIGMA_HANDLER``
    or the fastest available) in ``dtype`` (default: the one it was saved in)."""
    from . import backend
    from .architecture import from_layer_list
    from .network import Network

    path = Path(path)
    if path.suffix == ".safetensors":
        name, layers, saved_dtype, parameters, _ = _read_safetensors(path)
    else:
        from .checkpoint import load_checkpoint
        checkpoint = load_checkpoint(path)
        if checkpoint.config is None:
            raise SigmaError(f"checkpoint {path}: saved from code without a run config, so it holds no architecture; "
                             "build the Network in code and call network.load_state_dict(checkpoint.parameters)")
        name, layers = checkpoint.config["name"], checkpoint.config["network"]["layers"]
        saved_dtype, parameters = checkpoint.metadata["handler"]["dtype"], checkpoint.parameters
    if handler is None or isinstance(handler, str):
        handler_name, source = backend.resolve_handler_name(cli=handler)
        handler = backend.create_handler(handler_name, dtype=dtype or saved_dtype, seed=0, source=source)
    try:
        network = Network(from_layer_list(layers), name=name)
    except SigmaError as error:  # the layer list a file holds: name the file
        raise SigmaError(f"{path}: {error}") from None
    network.initialise(handler)
    try:
        network.load_state_dict(parameters)
    except SigmaError as error:
        raise SigmaError(f"{path}: the parameters do not fit its architecture ({error})") from None
    return network


def class_probabilities(network, predictions: numpy.ndarray) -> numpy.ndarray:
    """Per-class probabilities: the softmax of a softmax cross-entropy network's logits; other outputs as they are."""
    if not any(type(layer).__name__ == "SoftmaxCrossEntropy" for layer in network.layers.values()):
        return predictions
    shifted = numpy.exp(predictions - predictions.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def export_safetensors(source, path) -> Path:
    """Write the parameters of the checkpoint ``source`` to ``path``, with its name, dtype and layer list as metadata
    (the built-in ``safetensors`` exporter of ``sigma export``)."""
    from .checkpoint import load_checkpoint

    from .atomic import atomic_write

    try:
        from safetensors.numpy import save
    except ImportError:
        raise SigmaError("exporting to safetensors needs the safetensors package: pip install 'sigmann[export]'") from None
    checkpoint = load_checkpoint(source)
    if checkpoint.config is None:
        raise SigmaError(f"checkpoint {checkpoint.path}: saved from code without a run config, so it holds no architecture")
    metadata = {"format": "sigma-network", "name": checkpoint.config["name"], "dtype": checkpoint.metadata["handler"]["dtype"],
                "layers": json.dumps(checkpoint.config["network"]["layers"]), "preprocess": json.dumps(_preprocess(checkpoint))}
    data = save({pid: numpy.asarray(a, order="C") for pid, a in checkpoint.parameters.items()}, metadata)
    with atomic_write(path) as stream:
        stream.write(data)
    return Path(path)


def saved_preprocess(path) -> list:
    """The run's ``data.preprocess`` transforms, saved in a checkpoint or an export, for raw inputs such as images."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return _read_safetensors(path)[4]
    from .checkpoint import load_checkpoint
    return _preprocess(load_checkpoint(path))


def _preprocess(checkpoint) -> list:
    return (checkpoint.config or {}).get("data", {}).get("preprocess", [])


def _read_safetensors(path: Path):
    check_readable(path, SigmaError, "export")
    try:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file, safe_open
    except ImportError:
        raise SigmaError(f"{path}: reading safetensors needs the safetensors package: pip install 'sigmann[export]'") from None
    try:
        with safe_open(str(path), framework="numpy") as stream:
            metadata = stream.metadata() or {}
        if metadata.get("format") != "sigma-network":
            raise SigmaError(f"{path}: not a network exported by `sigma export` (no sigma-network metadata)")
        layers, preprocess = json.loads(metadata["layers"]), json.loads(metadata.get("preprocess", "[]"))
        require("layers", ["table"], layers)
        require("dtype", ("float32", "float64"), metadata["dtype"])
        require("preprocess", "array", preprocess)
        return metadata["name"], layers, metadata["dtype"], load_file(str(path)), preprocess
    except (OSError, SafetensorError, ConfigError, KeyError, ValueError, RecursionError) as error:  # Recursion: JSON
        raise SigmaError(f"{path}: cannot read it as a safetensors export ({error})") from None

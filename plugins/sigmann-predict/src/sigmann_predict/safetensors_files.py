"""Networks as safetensors files: the ``safetensors`` exporter (``sigma export``) and loader (``sigma_core.load``).

The file holds the parameters, with the run's name, dtype, layer list and fitted preprocess transforms as JSON
metadata, so a loaded network needs no run file and takes raw inputs.
"""

import json
from pathlib import Path

import numpy

from sigma_core import (ConfigError, Preprocessing, Saved, SigmaError, atomic_write, check_readable, read_saved,
                        require)


def export_safetensors(source, path) -> Path:
    """Write the parameters of the checkpoint ``source`` to ``path``, with its name, dtype, layer list and fitted
    preprocess transforms as metadata."""
    save = _safetensors(path).numpy.save
    saved = read_saved(source)
    metadata = {"format": "sigma-network", "name": saved.name, "dtype": saved.dtype, "layers": json.dumps(saved.layers),
                "preprocess": json.dumps(saved.preprocess)}
    data = save({pid: numpy.asarray(a, order="C") for pid, a in saved.parameters.items()}, metadata)
    with atomic_write(path) as stream:
        stream.write(data)
    return Path(path)


def read_safetensors(path: Path) -> Saved:
    """The network a safetensors export holds, unbuilt; anything else is one line naming the file."""
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


def _safetensors(path):
    """The ``safetensors`` package, or one line naming ``path`` and how to install it."""
    try:
        import safetensors.numpy
    except ImportError:
        raise SigmaError(f"{path}: safetensors files need the safetensors package: pip install safetensors") from None
    return safetensors

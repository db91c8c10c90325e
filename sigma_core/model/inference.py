"""Using a trained network: load one from a checkpoint, or from an export a plugin reads (``register_loaders``).

Either file holds the run's layer list (a checkpoint in its run config, an export as metadata) and its
``preprocess`` transforms with their fitted statistics, so a loaded network needs no run file and predicts
from raw inputs. Writing exports and predicting from files are applications: ``sigmann-predict``.
"""

from pathlib import Path
from typing import NamedTuple

from sigma_core.training.checkpoint import load_checkpoint
from sigma_core.data.preprocessing import Preprocessing
from sigma_core.errors import SigmaError


class Saved(NamedTuple):
    """What a checkpoint or an export holds of a trained network."""

    name: str
    layers: list  # the run file's network.layers
    dtype: str
    parameters: dict  # parameter id -> NumPy array
    preprocess: list  # the run's preprocess transforms, statistics fitted (an older Sigma's file: as written)


def read_saved(path) -> Saved:
    """The network saved in ``path``, a ``.ckpt`` checkpoint or an export a loader reads by its suffix, unbuilt."""
    from sigma_core import plugins
    from sigma_core.training.checkpoint import CheckpointError

    path = Path(path)
    loaders = {name: c for c in plugins.components("loader") for name in (c.name, *c.aliases)}
    if path.suffix[1:] in loaders:
        return loaders[path.suffix[1:]].load()(path)
    try:
        checkpoint = load_checkpoint(path)
    except CheckpointError as error:
        if path.suffix in ("", ".ckpt"):
            raise
        raise SigmaError(f"{error}; and no installed loader reads {path.suffix} files (loaders: "
                         f"{', '.join(sorted(loaders)) or 'none'}); {plugins.MORE}") from None
    if checkpoint.config is None:
        raise SigmaError(f"checkpoint {path}: saved from code without a run config, so it holds no architecture; "
                         "build the Network in code and call network.load_state_dict(checkpoint.parameters)")
    fitted = checkpoint.metadata["preprocess"]  # None from an older Sigma: its run file's transforms, as written
    preprocess = checkpoint.config.get("data", {}).get("preprocess", []) if fitted is None else fitted
    return Saved(checkpoint.config["name"], checkpoint.config["network"]["layers"],
                 checkpoint.metadata["handler"]["dtype"], checkpoint.parameters, preprocess)


def load(path, handler=None, *, dtype: str | None = None):
    """The network saved in ``path`` (a ``.ckpt`` checkpoint or an export such as ``.safetensors``), ready to
    :meth:`~sigma_core.model.network.Network.predict` raw inputs (its run's fitted preprocessing applies first) on
    ``handler`` (an object, a name, or None: ``SIGMA_HANDLER`` or the fastest available) in ``dtype``
    (default: the one it was saved in)."""
    from sigma_core.compute import backend
    from sigma_core.model.architecture import from_layer_list
    from sigma_core.model.network import Network

    path = Path(path)
    saved = read_saved(path)
    preprocessing = Preprocessing(saved.preprocess)
    if preprocessing.adaptive:  # a file written before Sigma kept the fitted statistics
        raise SigmaError(f"{path}: its run's preprocess transform {preprocessing.adaptive[0]!r} takes statistics from "
                         "the training data, which this file (written by an older Sigma) does not hold; train again")
    if handler is None or isinstance(handler, str):
        handler = backend.create_handler(handler, dtype=dtype or saved.dtype, seed=0)
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

"""Checkpoints: everything a run needs to stop and later continue bit for bit.

A checkpoint is one ``.ckpt`` file, a zip archive that ``numpy.load(path,
allow_pickle=False)`` opens like an ``.npz``:

``parameters/<id>.npy``
    each network parameter, by id (``"2-dense.weights"``);
``optimiser/<id>/<buffer>.npy``
    each optimiser memory buffer (Adam's ``m`` and ``v``, ...);
``metadata.json``
    format and version, handler name and dtype, the trainer's state (epoch,
    iteration, total iterations, costs, iterator positions, RNG state), the
    optimiser's non-array state (type, hyperparameters, freeze filters, step
    count), the ids of the arrays above, and the run's validated config;
``checksum.json``
    the SHA-256 of every other member's name and bytes.

No pickle anywhere: arrays are plain ``.npy``, the rest is JSON. Arrays go
through NumPy, so a checkpoint written by one handler (or dtype) loads on
another. The checksum turns a truncated or corrupted file into a
:class:`CheckpointError` naming the file and what is wrong, instead of a
resumed run that silently trains from garbage.

Writes are atomic: the archive goes to a temporary file in the target
directory, is flushed and fsynced, renamed over the final name, and the
directory is fsynced. A crash (even SIGKILL) mid-write leaves the previous
checkpoints intact and no partial ``.ckpt`` behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy

from .atomic import atomic_write
from .errors import SigmaError

log = logging.getLogger("sigma")

FORMAT = "sigma-checkpoint"
VERSION = 1
SUFFIX = ".ckpt"
METADATA = "metadata.json"
CHECKSUM = "checksum.json"


class CheckpointError(SigmaError):
    """A checkpoint cannot be read: missing, truncated, corrupted or of another format."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: verified arrays and metadata, not yet applied to anything."""

    path: Path
    metadata: dict
    parameters: dict  # parameter id -> NumPy array

    #: The optimiser's state in :meth:`Optimiser.state_dict` form, memory as NumPy arrays.
    optimiser: dict

    @property
    def config(self) -> dict | None:
        """The validated run config it was saved with (None for runs built in code)."""
        return self.metadata["config"]

    @property
    def trainer(self) -> dict:
        return self.metadata["trainer"]


# -- writing -------------------------------------------------------------------------------------------


def save_checkpoint(trainer, run_config: dict | None, path) -> Path:
    """Write ``trainer``'s full state (and the run's config) atomically to ``path``."""
    path = Path(path)
    optimiser = trainer.optimiser.state_dict()
    memory = optimiser.pop("memory")
    optimiser["memory"] = {pid: list(buffers) for pid, buffers in memory.items()}
    parameters = trainer.network.state_dict()
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "handler": {"name": trainer.handler.name, "dtype": trainer.handler.dtype},
        "trainer": trainer.state_dict(),
        "optimiser": optimiser,
        "parameters": list(parameters),
        "config": run_config,
    }
    members = {_parameter_member(pid): _npy_bytes(array) for pid, array in parameters.items()}
    for pid, buffers in memory.items():
        for name, array in buffers.items():
            members[_memory_member(pid, name)] = _npy_bytes(array)
    members[METADATA] = json.dumps(metadata, indent=1).encode()
    members[CHECKSUM] = json.dumps({"sha256": _digest(members)}).encode()
    _write_atomically(path, members)
    return path


def _parameter_member(pid: str) -> str:
    return f"parameters/{pid}.npy"


def _memory_member(pid: str, buffer: str) -> str:
    return f"optimiser/{pid}/{buffer}.npy"


def _npy_bytes(array) -> bytes:
    stream = io.BytesIO()
    numpy.lib.format.write_array(stream, numpy.ascontiguousarray(array), allow_pickle=False)
    return stream.getvalue()


def _digest(members: dict) -> str:
    """SHA-256 over every member except the checksum, names included, in name order."""
    sha = hashlib.sha256()
    for name in sorted(members):
        if name == CHECKSUM:
            continue
        data = members[name]
        sha.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
        sha.update(data)
    return sha.hexdigest()


def _write_atomically(path: Path, members: dict) -> None:
    with atomic_write(path) as stream:
        with zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED) as archive:
            for name, data in members.items():
                archive.writestr(name, data)


# -- reading ---------------------------------------------------------------------------------------------


def load_checkpoint(path) -> Checkpoint:
    """Read and verify the checkpoint at ``path``; :class:`CheckpointError` says what is wrong."""
    path = Path(path)
    members = _read_members(path)
    if CHECKSUM not in members or METADATA not in members:
        raise CheckpointError(f"checkpoint {path}: not a Sigma checkpoint (no {CHECKSUM} or {METADATA})")
    try:
        expected = json.loads(members[CHECKSUM])["sha256"]
    except (ValueError, KeyError, TypeError):
        raise CheckpointError(f"checkpoint {path}: corrupted ({CHECKSUM} is unreadable)") from None
    if _digest(members) != expected:
        raise CheckpointError(f"checkpoint {path}: corrupted (SHA-256 checksum mismatch)")
    try:  # verified, so a failure below means a checkpoint written by other code
        metadata = json.loads(members[METADATA])
        if metadata.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint {path}: not a Sigma checkpoint (format {metadata.get('format')!r})")
        if metadata.get("version") != VERSION:
            raise CheckpointError(f"checkpoint {path}: format version {metadata.get('version')!r} "
                                  f"is not supported (this Sigma reads version {VERSION})")
        parameters = {pid: _npy_array(members[_parameter_member(pid)]) for pid in metadata["parameters"]}
        optimiser = dict(metadata["optimiser"])
        optimiser["memory"] = {
            pid: {name: _npy_array(members[_memory_member(pid, name)]) for name in buffers}
            for pid, buffers in optimiser["memory"].items()
        }
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint {path}: malformed ({type(error).__name__}: {error})") from None
    return Checkpoint(path, metadata, parameters, optimiser)


def _read_members(path: Path) -> dict:
    """Every member's bytes; truncation and zip-level damage become one clear error."""
    try:
        stream = open(path, "rb")
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path}: no such file") from None
    except IsADirectoryError:
        raise CheckpointError(f"checkpoint {path}: is a directory, not a checkpoint file") from None
    except OSError as error:
        raise CheckpointError(f"checkpoint {path}: cannot read it ({error.strerror or error})") from None
    with stream:
        try:
            with zipfile.ZipFile(stream) as archive:
                return {name: archive.read(name) for name in archive.namelist()}
        except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError) as error:
            # BadZipFile: truncated (no central directory) or a bad CRC; the others are
            # damaged header fields (offsets, sizes, compression method) that zipfile trips over.
            raise CheckpointError(f"checkpoint {path}: truncated or corrupted ({error})") from None


def _npy_array(data: bytes) -> numpy.ndarray:
    return numpy.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


# -- applying ---------------------------------------------------------------------------------------------


def restore(trainer, checkpoint: Checkpoint) -> None:
    """Put ``checkpoint`` into an initialised ``trainer``: parameters, optimiser, counters, iterators, RNG.

    Arrays are converted to the trainer's handler and dtype, so this works
    across handlers; an exact continuation needs the same handler and dtype.
    """
    if trainer.handler is None:
        raise SigmaError(f"trainer {trainer.name!r}: initialise it on a handler before restoring a checkpoint")
    saved = checkpoint.metadata["handler"]
    if (saved["name"], saved["dtype"]) != (trainer.handler.name, trainer.handler.dtype):
        log.warning("checkpoint %s was saved on %s (%s) and loads on %s (%s): training continues, "
                    "but not bit-identically", checkpoint.path.name, saved["name"], saved["dtype"],
                    trainer.handler.name, trainer.handler.dtype)
    trainer.network.load_state_dict(checkpoint.parameters)
    trainer.optimiser.load_state_dict(checkpoint.optimiser, trainer.handler)
    trainer.load_state_dict(checkpoint.trainer)
    trainer.refresh_trainable()  # the checkpoint's freeze filters may differ from the config's


# -- saving during training ---------------------------------------------------------------------------------


class CheckpointSaver:
    """An operator observer that saves a checkpoint every n iterations and/or epochs, keeping the last ``keep``.

    Files are named ``<trainer>-e<epochs done>-i<iterations into the next epoch>.ckpt``;
    ``latest_checkpoint`` finds the one written last.
    """

    def __init__(self, directory, *, every_iterations: int = 0, every_epochs: int = 0, keep: int = 3,
                 config: dict | None = None):
        for key, value in (("every_iterations", every_iterations), ("every_epochs", every_epochs)):
            if value < 0:
                raise SigmaError(f"checkpoint: {key} must be 0 (never) or a positive number, got {value}")
        if keep < 1:
            raise SigmaError(f"checkpoint: keep must be at least 1, got {keep}")
        self.directory = Path(directory)
        self.every_iterations = every_iterations
        self.every_epochs = every_epochs
        self.keep = keep
        self.config = config

    def on_epoch_start(self, trainer, batches):
        pass

    def on_iteration(self, trainer):
        if self.every_iterations and trainer.total_iterations % self.every_iterations == 0:
            self.save(trainer)

    def on_epoch_end(self, trainer, report):
        if self.every_epochs and trainer.epoch % self.every_epochs == 0:
            self.save(trainer)

    def save(self, trainer) -> Path:
        """Save now, then delete all but the newest ``keep`` checkpoints of this trainer."""
        iteration = trainer.iteration if trainer.in_epoch else 0
        path = save_checkpoint(trainer, self.config, self.directory / f"{trainer.name}-e{trainer.epoch}-i{iteration}{SUFFIX}")
        for old in checkpoints(self.directory, trainer.name)[:-self.keep]:
            old.unlink()
        log.debug("saved checkpoint %s", path)
        return path


def checkpoints(directory, name: str) -> list[Path]:
    """The checkpoints of the trainer ``name`` in ``directory``, oldest written first.

    Ordered by modification time, not by the epoch in the name: after a
    reset a trainer counts epochs from 1 again, and its newest checkpoint
    must not sort (and be rotated away) as the oldest.
    """
    pattern = re.compile(rf"{re.escape(name)}-e(\d+)-i(\d+){re.escape(SUFFIX)}")
    found = []
    for path in Path(directory).glob(f"*{SUFFIX}"):
        match = pattern.fullmatch(path.name)
        if match:
            found.append((path.stat().st_mtime_ns, int(match[1]), int(match[2]), path))
    return [entry[-1] for entry in sorted(found)]


def latest_checkpoint(directory, name: str) -> Path | None:
    """The newest checkpoint of the trainer ``name`` in ``directory``, or None."""
    found = checkpoints(directory, name)
    return found[-1] if found else None


def saver_from_config(config: dict) -> CheckpointSaver | None:
    """The saver a run file's ``[checkpoint]`` section asks for, or None if it asks for none."""
    section = config["checkpoint"]
    if not (section["every_iterations"] or section["every_epochs"]):
        return None
    return CheckpointSaver(section["directory"], every_iterations=section["every_iterations"],
                           every_epochs=section["every_epochs"], keep=section["keep"], config=config)

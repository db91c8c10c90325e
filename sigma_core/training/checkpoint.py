"""Checkpoints: everything a run needs to stop and later continue bit for bit.

A checkpoint is one ``.ckpt`` zip of stored members that ``numpy.load`` opens like an ``.npz``:
``parameters/<id>.npy`` (``Network.state_dict``: parameters and layer state), ``optimiser/<id>/<buffer>.npy``,
``metadata.json`` (handler, the trainer's and optimiser's other state, the run config, its ``preprocess``
transforms as fitted) and ``checksum.json`` (a SHA-256 of the others). No pickle: it loads on any handler.

Nothing a file says is trusted: member sizes are held against the file and the memory available before
anything is read (a zip bomb is refused unread), the checksum before any member is parsed, and the metadata
must follow :data:`METADATA_RULES`; every failure is one :class:`CheckpointError` naming the file. Writes are
atomic and never hold a non-finite value, so the newest checkpoint is always one a run can resume from.
"""

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy

from sigma_core.compute import memory
from sigma_core.atomic import WriteError, atomic_write, check_writable, remove_stale, write_error
from sigma_core.config import accepts, require
from sigma_core.data.numpy_files import DAMAGED, NUMBERS, read_array
from sigma_core.data.preprocessing import Preprocessing
from sigma_core.errors import ConfigError, NonFiniteError, SigmaError
from sigma_core.reading import check_readable

log = logging.getLogger("sigma")

FORMAT = "sigma-checkpoint"
VERSION = 1
SUFFIX = ".ckpt"
METADATA = "metadata.json"
CHECKSUM = "checksum.json"


class CheckpointError(SigmaError):
    """A checkpoint cannot be read or written: missing, truncated, corrupted, of another format, or disk full."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: verified arrays and metadata, not yet applied to anything."""

    path: Path
    metadata: dict
    parameters: dict  # parameter id -> NumPy array
    optimiser: dict  # as Optimiser.state_dict(), memory as NumPy arrays

    @property
    def config(self) -> dict | None:
        """The validated run config it was saved with (None for runs built in code)."""
        return self.metadata["config"]

    @property
    def trainer(self) -> dict:
        return self.metadata["trainer"]


def save_checkpoint(trainer, run_config: dict | None, path, *, directory=None) -> Path:
    """Write ``trainer``'s full state (and the run's config) atomically to ``path``; ``directory``, the run's own,
    is kept in the metadata: a run resumed from the checkpoint continues there.

    A parameter or optimiser buffer holding NaN or Inf raises :class:`NonFiniteError` instead, and a failed
    write (a full disk) :class:`CheckpointError`; either way the previous files stay.
    """
    path = Path(path)
    optimiser = trainer.optimiser.state_dict()
    buffers = optimiser.pop("memory")
    optimiser["memory"] = {pid: list(named) for pid, named in buffers.items()}
    parameters = trainer.network.state_dict()
    arrays = {f"parameters/{pid}.npy": array for pid, array in parameters.items()}
    arrays.update((f"optimiser/{pid}/{name}.npy", array)
                  for pid, named in buffers.items() for name, array in named.items())
    for member, array in arrays.items():
        if bad := array.size - int(numpy.count_nonzero(numpy.isfinite(array))):
            latest = latest_checkpoint(path.parent, trainer.name)
            raise NonFiniteError(
                f"not saving checkpoint {path}: {member.removesuffix('.npy')} holds {bad} non-finite value(s) after "
                f"training step {trainer.total_iterations} (epoch {trainer.epoch + trainer.in_epoch}, iteration "
                f"{trainer.iteration}); " + (f"the last good one is {latest}" if latest else "none was saved before"))
    metadata = {"format": FORMAT, "version": VERSION,
                "handler": {"name": trainer.handler.name, "dtype": trainer.handler.dtype},
                "trainer": trainer.state_dict(), "optimiser": optimiser, "parameters": list(parameters),
                "config": run_config, "directory": None if directory is None else str(Path(directory).resolve()),
                "preprocess": None if trainer.network.preprocessing is None else trainer.network.preprocessing.fitted()}
    members = {}
    for name, array in arrays.items():
        stream = io.BytesIO()  # write_array, not numpy.save: it keeps 0-d arrays 0-d
        numpy.lib.format.write_array(stream, numpy.asarray(array, order="C"), allow_pickle=False)
        members[name] = stream.getvalue()
    members[METADATA] = json.dumps(metadata, indent=1).encode()
    members[CHECKSUM] = json.dumps({"sha256": _digest(members)}).encode()
    try:
        with (atomic_write(path, what="checkpoint") as stream,
              zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED) as archive):
            for name, data in members.items():
                archive.writestr(name, data)
    except WriteError as error:
        raise CheckpointError(f"{error}; the previous checkpoints are kept") from None
    return path


def _digest(members: dict) -> str:
    """SHA-256 over every member's name, size and bytes, in name order."""
    sha = hashlib.sha256()
    for name in sorted(members):
        sha.update(name.encode() + b"\0" + len(members[name]).to_bytes(8, "little"))
        sha.update(members[name])
    return sha.hexdigest()


def load_checkpoint(path) -> Checkpoint:
    """Read and verify the checkpoint at ``path``; :class:`CheckpointError` says what is wrong."""
    path = Path(path)
    members = _read_members(path)
    try:
        metadata = json.loads(members[METADATA])
        if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint {path}: not a Sigma checkpoint (its {METADATA} names no {FORMAT!r})")
        if metadata.get("version") != VERSION:
            raise CheckpointError(f"checkpoint {path}: format version {metadata.get('version')!r} "
                                  f"is not supported (this Sigma reads version {VERSION})")
        require("metadata", METADATA_RULES, metadata, complete=True)
        if metadata.setdefault("preprocess", None) is not None:  # None: a run built in code, or an older Sigma
            Preprocessing(metadata["preprocess"])  # the fitted transforms as a run file gives them: same rules
        parameters = {pid: _array(members, f"parameters/{pid}.npy", "f") for pid in metadata["parameters"]}
        optimiser = {**metadata["optimiser"], "memory": {
            pid: {name: _array(members, f"optimiser/{pid}/{name}.npy", NUMBERS) for name in names}
            for pid, names in metadata["optimiser"]["memory"].items()}}
    except (ConfigError, ValueError, KeyError, TypeError) as error:  # JSON's and UTF-8's errors are ValueErrors
        raise CheckpointError(f"checkpoint {path}: malformed ({error})") from None
    return Checkpoint(path, metadata, parameters, optimiser)


def _read_members(path: Path) -> dict:
    """Every member's bytes, read once their sizes fit the file and the memory available; checksum verified."""
    check_readable(path, CheckpointError, "checkpoint")  # a directory, a FIFO, a device
    try:
        stream = open(path, "rb")
    except OSError as error:
        reason = "no such file" if isinstance(error, FileNotFoundError) else f"cannot read it ({error.strerror})"
        raise CheckpointError(f"checkpoint {path}: {reason}") from None
    try:
        with stream, zipfile.ZipFile(stream) as archive:
            infos = archive.infolist()
            _check_sizes(path, infos, os.fstat(stream.fileno()).st_size)
            members = {info.filename: archive.read(info) for info in infos}
    except DAMAGED as error:  # damaged header fields (offsets, sizes, flags, names) trip zipfile in many ways
        raise CheckpointError(f"checkpoint {path}: truncated or corrupted ({error})") from None
    if CHECKSUM not in members or METADATA not in members:
        raise CheckpointError(f"checkpoint {path}: not a Sigma checkpoint (no {CHECKSUM} or {METADATA})")
    try:
        expected = json.loads(members.pop(CHECKSUM))["sha256"]
    except (ValueError, KeyError, TypeError):
        raise CheckpointError(f"checkpoint {path}: corrupted ({CHECKSUM} is unreadable)") from None
    if _digest(members) != expected:
        raise CheckpointError(f"checkpoint {path}: corrupted (SHA-256 checksum mismatch)")
    return members


def _check_sizes(path: Path, infos, file_size: int) -> None:
    """Refuse what Sigma never writes, and sizes the file cannot hold, before anything is read."""
    if len({info.filename for info in infos}) != len(infos):
        raise CheckpointError(f"checkpoint {path}: corrupted (a member name appears twice)")
    claimed = sum(info.file_size for info in infos)
    if claimed > file_size:
        raise CheckpointError(f"checkpoint {path}: corrupted (its members claim {claimed:,} bytes, "
                              f"more than the file's {file_size:,}); refusing to read them")
    for info in infos:
        if info.flag_bits & 0x1 or info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise CheckpointError(f"checkpoint {path}: corrupted or not a Sigma checkpoint (member "
                                  f"{info.filename!r} is encrypted or compressed)")
    memory.require(claimed, f"checkpoint {path}: its members", CheckpointError)


def _array(members: dict, name: str, kinds: str) -> numpy.ndarray:
    """The array in member ``name`` (dropped from ``members``), exactly its bytes, of a dtype kind in ``kinds``."""
    if name not in members:
        raise ValueError(f"member {name} is missing")
    data = members.pop(name)
    stream, what = io.BytesIO(data), name.removesuffix(".npy")
    array = read_array(stream, len(data), what, ValueError, kinds)
    if stream.tell() != len(data):
        raise ValueError(f"{what}: {len(data) - stream.tell():,} bytes follow the array its header describes")
    return array


#: What the metadata must hold, in the rules of :mod:`sigma_core.config` (a count: an integer >= 0).
METADATA_RULES = {
    "handler": {"name": "str", "dtype": "str"},
    "trainer": {"epoch": "int >= 0", "iteration": "int >= 0", "total_iterations": "int >= 0", "last_cost": "real",
                "epoch_cost": "real", "in_epoch": "bool", "training_iterator": "table", "validation_iterators": "table",
                "rng": {"handler": "str", "state": "any"}},
    "optimiser": {"optimiser": "str", "hyperparameters": "table", "memory": {...: ["str"]}},
    "parameters": ["str"],
    "config": "table or null",
}


def restore(trainer, checkpoint: Checkpoint) -> None:
    """Put ``checkpoint`` into an initialised ``trainer``: parameters, optimiser, counters, iterators, RNG.

    Arrays are converted to the trainer's handler and dtype (an exact continuation needs the same ones). One
    that does not fit raises :class:`CheckpointError`, the trainer maybe partly restored (initialise it again).
    """
    if trainer.handler is None:
        raise SigmaError(f"trainer {trainer.name!r}: initialise it on a handler before restoring a checkpoint")
    saved = checkpoint.metadata["handler"]
    if (saved["name"], saved["dtype"]) != (trainer.handler.name, trainer.handler.dtype):
        log.warning("checkpoint %s was saved on %s (%s) and loads on %s (%s): training continues, "
                    "but not bit-identically", checkpoint.path.name, saved["name"], saved["dtype"],
                    trainer.handler.name, trainer.handler.dtype)
    try:
        shapes = {pid: array.shape for pid, array in trainer.network.parameters.items()}
        for pid, buffers in checkpoint.optimiser["memory"].items():
            for name, array in buffers.items():
                if pid in shapes and array.shape != shapes[pid]:
                    raise ValueError(f"optimiser buffer {name} of {pid!r} has shape {array.shape}, "
                                     f"the parameter {shapes[pid]}")
        for key, value in checkpoint.optimiser["hyperparameters"].items():
            if accepts("number", getattr(trainer.optimiser, key, None)) and not accepts("number", value):
                raise ValueError(f"optimiser hyperparameter {key} is {value!r}, not a finite number")
        trainer.network.load_state_dict(checkpoint.parameters)
        trainer.optimiser.load_state_dict(checkpoint.optimiser, trainer.handler)
        trainer.load_state_dict(checkpoint.trainer)
        trainer.refresh_trainable()  # the checkpoint's freeze filters may differ from the config's
    except (SigmaError, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as error:
        detail = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        raise CheckpointError(f"checkpoint {checkpoint.path}: cannot be restored ({detail})") from None


def checkpoint_path(directory, trainer) -> Path:
    """``<trainer>-e<epochs done>-i<iterations into the next epoch>.ckpt`` in ``directory``."""
    return Path(directory) / f"{trainer.name}-e{trainer.epoch}-i{trainer.iteration if trainer.in_epoch else 0}{SUFFIX}"


def checkpoints(directory, name: str) -> list[Path]:
    """The checkpoints of the trainer ``name`` in ``directory``, oldest written first: by modification time, not
    the epoch in the name (after a reset a trainer counts from 1 again; its newest must not be rotated away)."""
    pattern = re.compile(rf"{re.escape(name)}-e(\d+)-i(\d+){re.escape(SUFFIX)}")
    found = []
    for path in Path(directory).glob(f"*{SUFFIX}"):
        if match := pattern.fullmatch(path.name):
            with contextlib.suppress(FileNotFoundError):  # deleted since the listing
                found.append((path.stat().st_mtime_ns, int(match[1]), int(match[2]), path))
    return [entry[-1] for entry in sorted(found)]


def latest_checkpoint(directory, name: str) -> Path | None:
    """The newest checkpoint of the trainer ``name`` in ``directory``, or None."""
    return next(reversed(checkpoints(directory, name)), None)


@contextlib.contextmanager
def run_lock(directory, name: str):
    """Hold the run ``name``'s checkpoints in ``directory``, so that two runs of one name never rotate each
    other's files away, while runs of other names share it (rotation goes by name too).

    A lock on ``<directory>/.<name>.lock``, released when the run ends or its process dies; another run of
    that name gets a :class:`CheckpointError`. Once held, the leftovers of writes killed midway are removed.
    """
    import fcntl

    directory = check_writable(directory, folder=True, what="checkpoint directory")
    path = directory / f".{name}.lock"
    try:
        lock = open(path, "a+")
    except OSError as error:
        raise write_error(path, error) from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise CheckpointError(f"run {name!r} is already training into checkpoint directory {directory} "
                                  f"({lock.read().strip() or 'unknown process'}); wait for it to end, or give this "
                                  "run another name (--set name=...)") from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        remove_stale(directory)
        yield directory

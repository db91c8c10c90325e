"""Checkpoints: everything a run needs to stop and later continue bit for bit.

A checkpoint is one ``.ckpt`` file, a zip archive of stored (uncompressed)
members that ``numpy.load(path, allow_pickle=False)`` opens like an ``.npz``:

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

No pickle anywhere, and arrays go through NumPy, so a checkpoint written by
one handler (or dtype) loads on another. Nothing a file says is trusted
unchecked; every failure is one :class:`CheckpointError` naming the file:
members must be stored, unencrypted, no larger together than the file (a zip
bomb or a lying size is refused before anything is allocated) and fit in
memory; the checksum is computed as they are read and compared before any is
parsed; each ``.npy`` header must account for exactly its bytes; arrays hold
real numbers (parameters floating point); metadata has the types written.
Writes are atomic (:mod:`sigma_core.atomic`) and never hold a non-finite
value, so the newest checkpoint is always one a run can resume from.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy

from . import memory
from .atomic import atomic_write, remove_stale
from .errors import NonFiniteError, SigmaError

log = logging.getLogger("sigma")

FORMAT = "sigma-checkpoint"
VERSION = 1
SUFFIX = ".ckpt"
METADATA = "metadata.json"
CHECKSUM = "checksum.json"
LOCK = ".lock"
CHUNK = 1 << 20


class CheckpointError(SigmaError):
    """A checkpoint cannot be read or written: missing, truncated, corrupted, of another format, or disk full."""


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
    """Write ``trainer``'s full state (and the run's config) atomically to ``path``.

    Raises :class:`NonFiniteError` instead of writing when a parameter or
    optimiser buffer holds NaN or Inf, and :class:`CheckpointError` when the
    file cannot be written (a full disk); either way the previous files stay.
    """
    path = Path(path)
    optimiser = trainer.optimiser.state_dict()
    buffers = optimiser.pop("memory")
    optimiser["memory"] = {pid: list(named) for pid, named in buffers.items()}
    parameters = trainer.network.state_dict()
    arrays = {_parameter_member(pid): array for pid, array in parameters.items()}
    arrays.update((_memory_member(pid, name), array) for pid, named in buffers.items() for name, array in named.items())
    for member, array in arrays.items():
        bad = array.size - int(numpy.count_nonzero(numpy.isfinite(array)))
        if bad:
            latest = latest_checkpoint(path.parent, trainer.name)
            raise NonFiniteError(
                f"not saving checkpoint {path}: {member.removesuffix('.npy')} holds {bad} non-finite value(s) after "
                f"training step {trainer.total_iterations} (epoch {trainer.epoch + trainer.in_epoch}, iteration "
                f"{trainer.iteration}); " + (f"the last good one is {latest}" if latest else "none was saved before"))
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "handler": {"name": trainer.handler.name, "dtype": trainer.handler.dtype},
        "trainer": trainer.state_dict(),
        "optimiser": optimiser,
        "parameters": list(parameters),
        "config": run_config,
    }
    members = {name: _npy_bytes(array) for name, array in arrays.items()}
    members[METADATA] = json.dumps(metadata, indent=1).encode()
    members[CHECKSUM] = json.dumps({"sha256": _digest(members)}).encode()
    try:
        with atomic_write(path) as stream, zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED) as archive:
            for name, data in members.items():
                archive.writestr(name, data)
    except OSError as error:
        raise CheckpointError(f"checkpoint {path}: cannot write it ({error.strerror or error}); "
                              "the previous checkpoints are kept") from None
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
        if name != CHECKSUM:
            _hash_header(sha, name, len(members[name]))
            sha.update(members[name])
    return sha.hexdigest()


def _hash_header(sha, name: str, size: int) -> None:
    sha.update(name.encode() + b"\0" + size.to_bytes(8, "little"))


# -- reading ---------------------------------------------------------------------------------------------


def load_checkpoint(path) -> Checkpoint:
    """Read and verify the checkpoint at ``path``; :class:`CheckpointError` says what is wrong."""
    path = Path(path)
    members = _read_members(path)
    try:
        metadata = json.loads(members[METADATA])
        if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint {path}: not a Sigma checkpoint (format "
                                  f"{metadata.get('format') if isinstance(metadata, dict) else None!r})")
        if metadata.get("version") != VERSION:
            raise CheckpointError(f"checkpoint {path}: format version {metadata.get('version')!r} "
                                  f"is not supported (this Sigma reads version {VERSION})")
        _check_types(metadata, _METADATA, "metadata")
        parameters = {pid: _npy_array(members, _parameter_member(pid), "f") for pid in metadata["parameters"]}
        optimiser = dict(metadata["optimiser"])
        optimiser["memory"] = {
            pid: {name: _npy_array(members, _memory_member(pid, name), "biuf") for name in buffers}
            for pid, buffers in optimiser["memory"].items()
        }
    except (ValueError, KeyError, TypeError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CheckpointError(f"checkpoint {path}: malformed ({error})") from None
    return Checkpoint(path, metadata, parameters, optimiser)


def _read_members(path: Path) -> dict:
    """Every member's bytes, checked against the file's size, available memory and the checksum."""
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
                infos = archive.infolist()
                _check_sizes(path, infos, os.fstat(stream.fileno()).st_size)
                if CHECKSUM not in archive.NameToInfo or METADATA not in archive.NameToInfo:
                    raise CheckpointError(f"checkpoint {path}: not a Sigma checkpoint (no {CHECKSUM} or {METADATA})")
                members = {CHECKSUM: archive.read(CHECKSUM)}
                sha = hashlib.sha256()
                for info in sorted(infos, key=lambda info: info.filename):
                    if info.filename != CHECKSUM:
                        members[info.filename] = _read_member(archive, info, sha)
        except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError, ValueError,
                zlib.error, OverflowError) as error:
            # BadZipFile: truncated (no central directory) or a bad CRC; the others: damaged header fields
            # (offsets, sizes, flags, names) that zipfile trips over in its own ways.
            raise CheckpointError(f"checkpoint {path}: truncated or corrupted ({error})") from None
    try:
        expected = json.loads(members[CHECKSUM])["sha256"]
    except (ValueError, KeyError, TypeError):
        raise CheckpointError(f"checkpoint {path}: corrupted ({CHECKSUM} is unreadable)") from None
    if sha.hexdigest() != expected:
        raise CheckpointError(f"checkpoint {path}: corrupted (SHA-256 checksum mismatch)")
    return members


def _check_sizes(path: Path, infos, file_size: int) -> None:
    """Refuse what Sigma never writes, and sizes the file cannot hold, before anything is read."""
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
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


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, sha) -> bytearray:
    """The member's bytes, hashed as they stream in (zipfile checks its CRC at the end)."""
    data = bytearray()
    _hash_header(sha, info.filename, info.file_size)
    with archive.open(info) as member:
        while chunk := member.read(CHUNK):
            sha.update(chunk)
            data += chunk
    if len(data) != info.file_size:
        raise zipfile.BadZipFile(f"member {info.filename!r} holds {len(data)} bytes, its header says {info.file_size}")
    return data


def _npy_array(members: dict, name: str, kinds: str) -> numpy.ndarray:
    """The array in member ``name``, whose header must account for exactly its bytes; dtype kind in ``kinds``."""
    if name not in members:
        raise ValueError(f"member {name} is missing")
    data = members[name]
    head = io.BytesIO(bytes(memoryview(data)[: 1 << 16]))
    try:  # NumPy parses the header with Python's tokenizer and ast, which fail in many ways on damaged text
        version = numpy.lib.format.read_magic(head)
        reader = {(1, 0): numpy.lib.format.read_array_header_1_0, (2, 0): numpy.lib.format.read_array_header_2_0}
        shape, fortran, dtype = reader[version](head)
    except Exception as error:
        raise ValueError(f"{name}: unreadable .npy header ({type(error).__name__}: {error})") from None
    if dtype.kind not in kinds or dtype.hasobject:
        wanted = "floating-point" if kinds == "f" else "real numbers"
        raise ValueError(f"{name.removesuffix('.npy')} has dtype {dtype}, not {wanted}")
    size = math.prod(shape) * dtype.itemsize
    if size != len(data) - head.tell():
        raise ValueError(f"{name}: its header claims shape {shape} of {dtype} ({size:,} bytes), "
                         f"the member holds {len(data) - head.tell():,}")
    return numpy.frombuffer(data, dtype, math.prod(shape), head.tell()).reshape(shape, order="F" if fortran else "C")


_COUNT, _NUMBER = "a count", (int, float)  # a count: a non-negative int, not a bool
_METADATA = {
    "handler": {"name": str, "dtype": str},
    "trainer": {"epoch": _COUNT, "iteration": _COUNT, "total_iterations": _COUNT, "last_cost": _NUMBER,
                "epoch_cost": _NUMBER, "in_epoch": bool, "training_iterator": dict, "validation_iterators": dict,
                "rng": {"handler": str, "state": object}},
    "optimiser": {"optimiser": str, "hyperparameters": dict, "memory": {str: [str]}},
    "parameters": [str],
    "config": (dict, type(None)),
}


def _check_types(value, rule, where: str) -> None:
    """Raise ValueError naming ``where`` unless ``value`` has the shape ``rule`` describes."""
    if isinstance(rule, dict) and str in rule:  # a table of any keys: {str: rule for every value}
        _check_types(value, dict, where)
        for key, item in value.items():
            _check_types(item, rule[str], f"{where}.{key}")
    elif isinstance(rule, dict):
        _check_types(value, dict, where)
        for key, item in rule.items():
            if key not in value:
                raise ValueError(f"{where}.{key} is missing")
            _check_types(value[key], item, f"{where}.{key}")
    elif isinstance(rule, list):
        _check_types(value, list, where)
        for index, item in enumerate(value):
            _check_types(item, rule[0], f"{where}[{index}]")
    elif rule is _COUNT:
        if type(value) is not int or value < 0:
            raise ValueError(f"{where} is {value!r}, not a count")
    elif isinstance(value, bool) and rule is _NUMBER or not isinstance(value, rule):
        expected = {dict: "a table", list: "a list", str: "a string", bool: "true or false", _NUMBER: "a number"}
        raise ValueError(f"{where} is {value!r}, not {expected.get(rule, 'a table or null')}")


# -- applying ---------------------------------------------------------------------------------------------


def restore(trainer, checkpoint: Checkpoint) -> None:
    """Put ``checkpoint`` into an initialised ``trainer``: parameters, optimiser, counters, iterators, RNG.

    Arrays are converted to the trainer's handler and dtype, so this works
    across handlers; an exact continuation needs the same handler and dtype.
    A checkpoint that does not fit the trainer raises :class:`CheckpointError`
    (the trainer may then be partly restored: initialise it again to reuse it).
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
            number = isinstance(value, _NUMBER) and not isinstance(value, bool) and math.isfinite(value)
            current = getattr(trainer.optimiser, key, None)
            if isinstance(current, _NUMBER) and not isinstance(current, bool) and not number:
                raise ValueError(f"optimiser hyperparameter {key} is {value!r}, not a finite number")
        trainer.network.load_state_dict(checkpoint.parameters)
        trainer.optimiser.load_state_dict(checkpoint.optimiser, trainer.handler)
        trainer.load_state_dict(checkpoint.trainer)
        trainer.refresh_trainable()  # the checkpoint's freeze filters may differ from the config's
    except CheckpointError:
        raise
    except (SigmaError, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as error:
        detail = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        raise CheckpointError(f"checkpoint {checkpoint.path}: cannot be restored ({detail})") from None


# -- files in a checkpoint directory ---------------------------------------------------------------------------------


def checkpoint_path(directory, trainer) -> Path:
    """``<trainer>-e<epochs done>-i<iterations into the next epoch>.ckpt`` in ``directory``."""
    iteration = trainer.iteration if trainer.in_epoch else 0
    return Path(directory) / f"{trainer.name}-e{trainer.epoch}-i{iteration}{SUFFIX}"


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
            with contextlib.suppress(FileNotFoundError):  # deleted since the listing
                found.append((path.stat().st_mtime_ns, int(match[1]), int(match[2]), path))
    return [entry[-1] for entry in sorted(found)]


def latest_checkpoint(directory, name: str) -> Path | None:
    """The newest checkpoint of the trainer ``name`` in ``directory``, or None."""
    found = checkpoints(directory, name)
    return found[-1] if found else None


@contextlib.contextmanager
def directory_lock(directory):
    """Hold ``directory`` for one run: another process asking for it gets a :class:`CheckpointError`.

    A lock on ``<directory>/.lock`` (released when the run ends or its process
    dies), so two runs never rotate each other's files away. Once held, the
    leftovers of writes killed midway are removed.
    """
    import fcntl

    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / LOCK, "a+")
    except OSError as error:
        reason = "a file is in the way" if isinstance(error, FileExistsError) else error.strerror or error
        raise CheckpointError(f"checkpoint directory {directory}: cannot write there ({reason})") from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise CheckpointError(f"checkpoint directory {directory} is in use by another run "
                                  f"({lock.read().strip() or 'unknown process'}); wait for it to end or "
                                  "set another checkpoint.directory") from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}\n")
        lock.flush()
        remove_stale(directory)
        yield directory

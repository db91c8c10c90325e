"""Checkpoints that must never be written, and files that must never be trusted (issue 10, items 6, 9, 10, 13).

Every bad file is one :class:`CheckpointError` naming it; nothing larger
than the file justifies is allocated; a non-finite state is never written.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import struct
import tracemalloc
import zipfile
from pathlib import Path

import numpy
import pytest

from sigma_core.training.checkpoint import CheckpointError, checkpoints, latest_checkpoint, load_checkpoint, restore, save_checkpoint
from sigma_core.cli import main
from sigma_core.model.constructs import Dense, Input, SquaredDifference
from sigma_core.data import MinibatchIterator, from_arrays
from sigma_core.errors import NonFiniteError
from sigma_core import CheckpointHook, NumpyHandler, build
from sigma_core.model.network import Network
from sigma_core.training.trainer import Trainer

CHECKSUM, METADATA, WEIGHTS = "checksum.json", "metadata.json", "parameters/2-dense.weights.npy"


def tiny_trainer(seed=0) -> Trainer:
    rng = numpy.random.default_rng(0)
    data = from_arrays(rng.normal(size=(20, 4)).astype("float32"), rng.normal(size=(20, 3)).astype("float32"))
    trainer = Trainer(Network(Input(4) + Dense(3) + SquaredDifference()),
                      build("optimiser", {"type": "adam", "learning_rate": 0.01}),
                      MinibatchIterator(data, 8, seed=seed), name="tiny")
    trainer.initialise(NumpyHandler("float32", seed=seed))
    return trainer


@pytest.fixture
def saved(tmp_path) -> Path:
    """A valid checkpoint of a trainer one epoch in (Adam memory, mid-run counters)."""
    trainer = tiny_trainer()
    trainer.run_epoch()
    return save_checkpoint(trainer, None, tmp_path / "tiny.ckpt")


def members_of(path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def rewrite(path, members: dict, compression=zipfile.ZIP_STORED) -> None:
    """Write ``members`` with a checksum that matches them: damage a corrupted file could not have by chance."""
    sha = hashlib.sha256()
    for name in sorted(members):
        if name != CHECKSUM:
            sha.update(name.encode() + b"\0" + len(members[name]).to_bytes(8, "little") + members[name])
    members = {**members, CHECKSUM: json.dumps({"sha256": sha.hexdigest()}).encode()}
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def npy(array) -> bytes:
    stream = io.BytesIO()
    numpy.lib.format.write_array(stream, array)
    return stream.getvalue()


def patch_central_directory(path, member: str, offset: int, fmt: str, value) -> None:
    """Overwrite one field of ``member``'s central-directory record (its local header is left as it was)."""
    data = bytearray(Path(path).read_bytes())
    start = 0
    while True:
        start = data.index(b"PK\x01\x02", start + 1)
        length = struct.unpack_from("<H", data, start + 28)[0]
        if data[start + 46:start + 46 + length] == member.encode():
            break
    struct.pack_into(fmt, data, start + offset, value)
    Path(path).write_bytes(bytes(data))


def refused(path, *fragments) -> str:
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert message.startswith(f"checkpoint {path}: "), message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


# -- item 6: a non-finite state is never written ------------------------------------------------------------


def test_a_non_finite_parameter_is_never_written_and_the_last_good_checkpoint_stays_newest(tmp_path):
    trainer = tiny_trainer()
    saver = CheckpointHook(tmp_path, keep=5)
    trainer.run_epoch()
    good = saver.save(trainer)
    before = good.read_bytes()
    weights = trainer.network.state_dict()
    weights["2-dense.weights"][1, 2] = -numpy.inf
    trainer.network.load_state_dict(weights)
    with pytest.raises(NonFiniteError, match=rf"not saving checkpoint {good}: parameters/2-dense\.weights "
                                             r"holds 1 non-finite value\(s\) after training step 3 \(epoch 1, iteration 3\); "
                                             rf"the last good one is {good}$"):
        saver.save(trainer)  # the same name: the good file must not be replaced
    assert checkpoints(tmp_path, "tiny") == [good] and good.read_bytes() == before
    assert not list(tmp_path.glob(".*"))


def test_a_non_finite_optimiser_buffer_is_never_written(tmp_path):
    trainer = tiny_trainer()
    trainer.run_epoch()
    state = trainer.optimiser.state_dict()
    state["memory"]["2-dense.biases"]["second_moment"][0] = numpy.nan
    trainer.optimiser.load_state_dict(state, trainer.handler)
    with pytest.raises(NonFiniteError, match="optimiser/2-dense.biases/second_moment holds 1 non-finite value.*"
                                             "none was saved before"):
        save_checkpoint(trainer, None, tmp_path / "tiny-e1-i0.ckpt")
    assert list(tmp_path.iterdir()) == []


DIVERGING = """
name = "div"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 256
shape = [16]
classes = 4
[split]
validation = 0.25
[[network.layers]]
type = "input"
shape = [16]
[[network.layers]]
type = "dense"
size = 4
[[network.layers]]
type = "softmax_ce"
[optimiser]
type = "gradient_descent"
learning_rate = 0.01
[[hooks]]                 # the rate grows 1e12-fold every step: the update of step 5 overflows float32
type = "exponential_schedule"
gamma = 1e12
per = "iteration"
[training]
batch_size = 16
epochs = 3
[checkpoint]
directory = "{directory}"
every_iterations = 1
keep = 3
"""


def test_a_diverging_learning_rate_leaves_the_last_good_checkpoint_newest_and_resumable(tmp_path, capsys):
    directory = tmp_path / "checkpoints"
    run_file = tmp_path / "div.toml"
    run_file.write_text(DIVERGING.format(directory=directory))

    def train(*extra):
        code = main(["train", str(run_file), "--quiet", *extra])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and "Warning" not in err, err
        [line] = [line for line in err.splitlines() if line.startswith("error:")]
        return line

    line = train()
    assert "not saving checkpoint" in line and "div-e0-i5.ckpt: parameters/2-dense.weights holds 64 non-finite" in line
    assert "after training step 5 (epoch 1, iteration 5)" in line and line.endswith("div-e0-i4.ckpt")
    newest = latest_checkpoint(directory, "div")
    assert newest.name == "div-e0-i4.ckpt"
    for path in checkpoints(directory, "div"):
        assert all(numpy.isfinite(value).all() for value in load_checkpoint(path).parameters.values())
    # The newest resumes and continues exactly: the same rate schedule diverges at the same step again.
    assert train("--resume", str(newest)) == line
    assert main(["eval", str(newest)]) == 0


# -- item 9: files respect the umask --------------------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_checkpoints_and_result_json_respect_the_umask(tmp_path, capsys, umask, mode):
    run_file = tmp_path / "run.toml"
    run_file.write_text(DIVERGING.format(directory=tmp_path / "ck").replace("gamma = 1e12", "gamma = 1.0"))
    previous = os.umask(umask)
    try:
        assert main(["train", str(run_file), "--quiet", "--set", "training.epochs=1",
                     "--out", str(tmp_path / "out" / "result.json")]) == 0, capsys.readouterr().err
        saved = save_checkpoint(tiny_trainer(), None, tmp_path / "direct.ckpt")
    finally:
        os.umask(previous)
    for path in (tmp_path / "out" / "result.json", latest_checkpoint(tmp_path / "ck", "div"), saved):
        assert path.stat().st_mode & 0o777 == mode, path


# -- item 10: sizes are checked before anything is allocated ----------------------------------------------------


def test_members_that_claim_more_bytes_than_the_file_holds_are_refused(saved):
    patch_central_directory(saved, WEIGHTS, 24, "<I", 0xFFFF0000)  # uncompressed size: 4 GB
    refused(saved, "members claim 4,294,", f"more than the file's {saved.stat().st_size:,}", "refusing")


def test_a_zip_bomb_is_refused_before_it_is_inflated(saved, tmp_path):
    bomb = tmp_path / "bomb.ckpt"
    members = members_of(saved)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        with archive.open("parameters/padding.npy", "w") as member:
            for _ in range(200):
                member.write(bytes(1 << 20))
    assert bomb.stat().st_size < 1 << 20  # 200 MiB of zeros in well under 1 MiB
    tracemalloc.start()
    try:
        refused(bomb, "members claim 209,", f"more than the file's {bomb.stat().st_size:,}")
        assert tracemalloc.get_traced_memory()[1] < 4 << 20
    finally:
        tracemalloc.stop()


def test_a_checkpoint_larger_than_available_memory_is_refused(saved, monkeypatch):
    monkeypatch.setattr("sigma_core.compute.memory.available", lambda: 1000)
    refused(saved, "its members need", "bytes, more than the 1,000 bytes of memory available")


def test_an_npy_header_claiming_more_elements_than_its_bytes_is_refused_without_allocating(saved):
    members = members_of(saved)
    header = numpy.lib.format.header_data_from_array_1_0(numpy.zeros(1, numpy.float32))
    header["shape"] = (10**6, 10**6)
    stream = io.BytesIO()
    numpy.lib.format.write_array_header_1_0(stream, header)
    members[WEIGHTS] = stream.getvalue() + bytes(48)
    rewrite(saved, members)
    tracemalloc.start()
    try:
        refused(saved, "malformed", "weights claims shape (1000000, 1000000) of float32 (4,000,000,000,000 bytes)",
                "only 48 bytes follow its header")
        assert tracemalloc.get_traced_memory()[1] < 4 << 20
    finally:
        tracemalloc.stop()


def test_the_checksum_is_checked_before_any_member_is_parsed(saved):
    members = members_of(saved)
    members[WEIGHTS] = b"\x93NUMPY garbage"
    with zipfile.ZipFile(saved, "w") as archive:  # the old checksum: the edit does not match it
        for name, data in members.items():
            archive.writestr(name, data)
    refused(saved, "checksum mismatch")


# -- item 13: every corruption is one line naming the file ---------------------------------------------------------


def test_an_encryption_flag_from_a_bit_flip_is_one_clear_error(saved):
    patch_central_directory(saved, WEIGHTS, 8, "<H", 0x1)  # zipfile: RuntimeError "password required"
    refused(saved, "encrypted or compressed")


def test_a_compression_method_from_a_bit_flip_is_one_clear_error(saved):
    patch_central_directory(saved, WEIGHTS, 10, "<H", zipfile.ZIP_DEFLATED)  # zipfile: zlib.error
    refused(saved, "encrypted or compressed")


@pytest.mark.parametrize("value, dtype", [(numpy.array([["a", "b", "c"]] * 4), "<U1"),
                                          (numpy.ones((4, 3), numpy.complex64), "complex64"),
                                          (numpy.ones((4, 3), numpy.int32), "int32")])
def test_parameters_that_are_not_floating_point_are_refused(saved, value, dtype):
    members = members_of(saved)
    members[WEIGHTS] = npy(value)
    rewrite(saved, members)
    refused(saved, f"parameters/2-dense.weights has dtype {dtype}, not floating-point")


@pytest.mark.parametrize("section, key, value, expected", [
    ("trainer", "epoch", "x", "metadata.trainer.epoch: expected an integer >= 0, got 'x'"),
    ("trainer", "iteration", -1, "metadata.trainer.iteration: expected an integer >= 0, got -1"),
    ("trainer", "in_epoch", 1, "metadata.trainer.in_epoch: expected true or false, got 1"),
    ("trainer", "last_cost", "0.5", "metadata.trainer.last_cost: expected a number, got '0.5'"),
    ("optimiser", "memory", {"2-dense.weights": "first_moment"}, "metadata.optimiser.memory.2-dense.weights: expected an array, got "),
    ("handler", "dtype", None, "metadata.handler.dtype: expected a string, got None"),
    (None, "parameters", [3], "metadata.parameters[0]: expected a string, got 3"),
    (None, "config", [], "metadata.config: expected a table or null, got []"),
])
def test_metadata_of_the_wrong_type_is_refused(saved, section, key, value, expected):
    members = members_of(saved)
    metadata = json.loads(members[METADATA])
    (metadata[section] if section else metadata)[key] = value
    members[METADATA] = json.dumps(metadata).encode()
    rewrite(saved, members)
    refused(saved, "malformed", expected)


@pytest.mark.parametrize("state", ["garbage", {"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}},
                                   {"bit_generator": "MT19937"}])
def test_a_garbage_rng_state_is_refused_when_restored(saved, state):
    members = members_of(saved)
    metadata = json.loads(members[METADATA])
    metadata["trainer"]["rng"]["state"] = state
    members[METADATA] = json.dumps(metadata).encode()
    rewrite(saved, members)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {saved}: cannot be restored \("):
        restore(tiny_trainer(), load_checkpoint(saved))


def test_a_bad_checkpoint_on_resume_is_one_line_and_leaves_the_others_intact(tmp_path, capsys):
    run_file = tmp_path / "run.toml"
    run_file.write_text(DIVERGING.format(directory=tmp_path / "ck").replace("gamma = 1e12", "gamma = 1.0"))
    assert main(["train", str(run_file), "--quiet", "--set", "training.epochs=1"]) == 0
    previous, newest = checkpoints(tmp_path / "ck", "div")[-2:]
    before = previous.read_bytes()
    members = members_of(newest)
    metadata = json.loads(members[METADATA])
    metadata["trainer"]["rng"]["state"] = {"bit_generator": "PCG64", "state": "garbage"}
    members[METADATA] = json.dumps(metadata).encode()
    rewrite(newest, members)
    capsys.readouterr()
    assert main(["train", str(run_file), "--quiet", "--set", "training.epochs=2", "--resume", str(newest)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("sigma: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: checkpoint {newest}: cannot be restored"), errors
    assert previous.read_bytes() == before
    load_checkpoint(previous)


def _mutants(data: bytes, members: dict, rng: random.Random):
    """Raw damage (bit flips, truncation, overwritten spans) and consistent damage (member edits with a fresh checksum)."""
    for _ in range(70):
        mutant = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            mutant[rng.randrange(len(mutant))] ^= 1 << rng.randrange(8)
        yield bytes(mutant), None
    for _ in range(15):
        yield data[:rng.randrange(len(data))], None
    for _ in range(15):
        start = rng.randrange(len(data))
        yield data[:start] + rng.randbytes(rng.randint(1, 64)) + data[start + 64:], None
    values = ["x", -1, 1e308, None, [], {}, True, 2**70, float("nan"), [1, "a"], {"a": 1}]
    for _ in range(60):  # a JSON value of the metadata replaced by one of another type or range
        metadata = json.loads(members[METADATA])
        node, key = metadata, None
        while isinstance(node, (dict, list)) and node:
            key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
            if not isinstance(node[key], (dict, list)) or not node[key] or rng.random() < 0.25:
                break
            node = node[key]
        node[key] = rng.choice(values)
        yield None, {**members, METADATA: json.dumps(metadata).encode()}
    arrays = [name for name in members if name.endswith(".npy")]
    for _ in range(40):  # an array member's bytes (header or data) changed
        name = rng.choice(arrays)
        changed = bytearray(members[name])
        for _ in range(rng.randint(1, 4)):
            changed[rng.randrange(min(len(changed), 128))] = rng.randrange(256)
        yield None, {**members, name: bytes(changed)}


def test_mutation_fuzz_any_damage_is_a_checkpoint_error_naming_the_file(saved, tmp_path):
    data, members = saved.read_bytes(), members_of(saved)
    mutant_path = tmp_path / "mutant.ckpt"
    outcomes = {"refused": 0, "loaded": 0}
    for raw, consistent in _mutants(data, members, random.Random(1234)):
        if raw is not None:
            mutant_path.write_bytes(raw)
        else:
            rewrite(mutant_path, consistent)
        try:
            restore(tiny_trainer(), load_checkpoint(mutant_path))
            outcomes["loaded"] += 1  # harmless: zip timestamps, or a value the trainer accepts
        except CheckpointError as error:
            assert str(error).startswith(f"checkpoint {mutant_path}: ") and "\n" not in str(error), error
            outcomes["refused"] += 1
    assert sum(outcomes.values()) == 200 and outcomes["refused"] > 150, outcomes

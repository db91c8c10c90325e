"""The IDX reader: big-endian types and gzip, headers held against the file and the memory available, the
``idx`` extractor, seeded corruptions refused in one line, and IDX inputs for ``sigma predict``."""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc

import numpy as np
import pytest
from sigmann_testing import fuzz_loader

import sigma_core
from sigma_core import DataError
from sigma_core.cli import main
from sigma_core.data import dataset_from_config
from sigmann_mnist import idx
from sigmann_mnist.idx import load_idx, read_idx


def idx_bytes(code: int, shape, payload: bytes) -> bytes:
    return bytes([0, 0, code, len(shape)]) + struct.pack(f">{len(shape)}I", *shape) + payload


def peak_bytes(function) -> int:
    """The most memory ``function`` held at once, while it raised DataError."""
    tracemalloc.start()
    try:
        with pytest.raises(DataError):
            function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_idx_reads_big_endian_types_and_gzip(tmp_path):
    values = np.array([[1.5, -2.0], [3.25, 4.0]])
    (tmp_path / "f.idx").write_bytes(idx_bytes(0x0E, (2, 2), values.astype(">f8").tobytes()))
    np.testing.assert_array_equal(read_idx(tmp_path / "f.idx"), values)
    shorts = np.array([-3, 300, 7], dtype=">i2")
    (tmp_path / "s.idx.gz").write_bytes(gzip.compress(idx_bytes(0x0B, (3,), shorts.tobytes())))
    np.testing.assert_array_equal(read_idx(tmp_path / "s.idx.gz"), [-3, 300, 7])


def test_truncated_idx_names_file_and_byte_counts(tmp_path):
    path = tmp_path / "short-images-idx3-ubyte"
    path.write_bytes(idx_bytes(0x08, (10, 28, 28), bytes(7000)))
    with pytest.raises(DataError, match=r"short-images-idx3-ubyte is truncated.*needs 7840 data bytes.*found 7000"):
        read_idx(path)


def test_bad_idx_magic_names_file_and_bytes(tmp_path):
    path = tmp_path / "not-idx.bin"
    path.write_bytes(b"PK\x03\x04 rest of a zip file")
    with pytest.raises(DataError, match=r"not-idx.bin is not an IDX file: bad magic number 50 4b 03 04"):
        read_idx(path)


def test_idx_extractor_pairs_images_and_labels(tmp_path):
    (tmp_path / "img").write_bytes(idx_bytes(0x08, (3, 2, 2), bytes(range(12))))
    (tmp_path / "lab").write_bytes(idx_bytes(0x08, (3,), bytes([1, 0, 2])))
    dataset = dataset_from_config({"extractor": "idx", "path": str(tmp_path / "img"),
                                   "targets_path": str(tmp_path / "lab"), "one_hot": 3})
    assert dataset.section("inputs").shape == (3, 2, 2) and dataset.section("targets").shape == (3, 3)
    (tmp_path / "short-idx").write_bytes(idx_bytes(0x08, (4, 2, 2), bytes(10)))
    with pytest.raises(DataError, match=r"short-idx is truncated: shape \(4, 2, 2\) .* needs 16 data bytes .* found 10"):
        dataset_from_config({"extractor": "idx", "path": str(tmp_path / "short-idx")})


# --- unreadable files, claims the file cannot hold ----------------------------------------------------------


def test_a_directory_where_a_file_belongs_is_named(tmp_path):
    folder = tmp_path / "data.bin"
    folder.mkdir()
    with pytest.raises(DataError, match=rf"IDX file {folder}: cannot read it \(it is a directory, not a regular f"):
        read_idx(folder)


def test_a_permission_error_is_named(tmp_path, monkeypatch):
    # Tests run as root, who may read anything: fail the open as a locked file would.
    def locked(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(idx, "open", locked, raising=False)
    path = tmp_path / "locked.bin"
    path.write_bytes(b"1,2\n")
    with pytest.raises(DataError, match=rf"cannot read IDX file {path}: Permission denied"):
        read_idx(path)


def test_idx_dimensions_that_overflow_int64_are_counted_exactly_and_allocate_nothing(tmp_path):
    path = tmp_path / "huge-idx"
    path.write_bytes(idx_bytes(0x0E, (2**32 - 1,) * 3, bytes(64)))
    needed = (2**32 - 1) ** 3 * 8
    assert needed > 2**63
    with pytest.raises(DataError, match=rf"huge-idx is truncated: shape .* of float64 needs {needed} data bytes .* found 64"):
        read_idx(path)
    assert peak_bytes(lambda: read_idx(path)) < 1_000_000


def test_a_gzipped_idx_claiming_more_than_deflate_can_hold_is_refused_unread(tmp_path):
    path = tmp_path / "bomb-idx.gz"
    path.write_bytes(gzip.compress(idx_bytes(0x08, (10**9,), bytes(1000))))
    with pytest.raises(DataError, match=r"bomb-idx.gz is truncated: .* needs 1000000000 data bytes .* found at most \d+ "
                                        r"\(the most a \d+-byte gzip holds\)"):
        read_idx(path)


def test_non_finite_values_are_refused_unless_allowed(tmp_path):
    (tmp_path / "f-idx").write_bytes(idx_bytes(0x0D, (2,), struct.pack(">2f", 1.0, float("nan"))))
    with pytest.raises(DataError, match=r"IDX file .*f-idx holds nan at index \[1\]"):
        load_idx(tmp_path / "f-idx")
    assert np.isnan(load_idx(tmp_path / "f-idx", allow_non_finite=True).section("inputs")[1])


@pytest.mark.parametrize("compressed", [False, True])
def test_fuzz_idx(tmp_path, compressed):
    def idx_file(code: str, values: np.ndarray) -> bytes:
        return idx_bytes({">u1": 0x08, ">f4": 0x0D}[code], values.shape, values.astype(code).tobytes())

    data = idx_file(">u1", np.random.default_rng(0).integers(0, 255, (6, 4, 4)))
    if compressed:  # gzip is checksummed, so mutate the IDX inside it as well as the stream
        fuzz_loader(tmp_path / "x-idx.gz", gzip.compress(data), read_idx, seed=3, factor=8)
        return
    fuzz_loader(tmp_path / "x-idx", data, read_idx, seed=4, factor=4)
    fuzz_loader(tmp_path / "f-idx", idx_file(">f4", np.linspace(-1, 1, 40).reshape(10, 4)), load_idx, seed=5, factor=4)


# --- sigma predict ------------------------------------------------------------------------------------------


RUN = """
name = "tiny"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 40
shape = [2, 3]
classes = 3
[[network.layers]]
type = "input"
shape = [2, 3]
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[training]
batch_size = 8
epochs = 1
[checkpoint]
directory = "{directory}"
every_epochs = 1
"""


@pytest.mark.parametrize("name", ["x-images-idx3-ubyte", "x.idx3-ubyte", "x.idx", "x-idx3-ubyte.gz"])
def test_sigma_predict_reads_an_idx_file(tmp_path, capsys, name):
    (tmp_path / "run.toml").write_text(RUN.format(directory=tmp_path.as_posix()))
    assert main(["train", str(tmp_path / "run.toml"), "--quiet"]) == 0
    checkpoint = tmp_path / "tiny-e1-i0.ckpt"
    inputs = np.random.default_rng(1).standard_normal((5, 2, 3)).astype(np.float32)
    data = idx_bytes(0x0D, inputs.shape, inputs.astype(">f4").tobytes())
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    capsys.readouterr()
    assert main(["predict", str(checkpoint), str(tmp_path / name), "--format", "json"]) == 0
    classes = [json.loads(line)["class"] for line in capsys.readouterr().out.splitlines()]
    assert classes == sigma_core.load(checkpoint, "numpy").predict(inputs).argmax(1).tolist()

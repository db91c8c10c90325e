"""sigmann-text's chars extractor and one_hot layer: windows, vocabulary, streaming, errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from sigma_core import plugins
from sigma_core.compute.backend import create_handler
from sigma_core.data import DataError, dataset_from_config
from sigma_core.errors import ShapeError
from sigma_core.model.layers.base import ForwardContext
from sigmann_text import chars as chars_module
from sigmann_text.chars import build_vocabulary, chars, decode, encode
from sigmann_text.layers import OneHot

TEXT = "héllo wörld, ünïcode ☃ text that is long enough for several windows\n" * 7


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGMA_DATA_DIR", str(tmp_path / "cache"))


def write(tmp_path, content, name="text.txt"):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def merged(chunks):
    chunks = list(chunks)
    return {s: np.concatenate([c[s] for c in chunks]) for s in chunks[0]}


def test_windows_are_the_text_and_the_next_character_of_every_step(tmp_path):
    path = write(tmp_path, "abcabcdabcd")
    data = merged(chars(path, sequence=3))
    assert data["inputs"].dtype == np.uint8
    assert decode(data["inputs"][1], np.array([ord(c) for c in "abcd"]), "utf-8") == "abc"
    # windows start every 3 characters while the window and the character after it fit: 0, 3, 6
    assert data["inputs"].tolist() == [[0, 1, 2], [0, 1, 2], [3, 0, 1]]
    assert data["targets"][..., 0].tolist() == [[1, 2, 0], [1, 2, 3], [0, 1, 2]]
    nxt = merged(chars(path, sequence=4, stride=1, target="next"))
    assert nxt["targets"].tolist() == [1, 2, 3, 0, 1, 2, 3] and len(nxt["inputs"]) == 7


def test_vocabulary_is_sorted_and_a_given_one_is_used(tmp_path):
    path = write(tmp_path, "bab☃")
    assert build_vocabulary(path).tolist() == [ord("a"), ord("b"), ord("☃")]
    assert build_vocabulary(path, given="zyx").tolist() == [ord("x"), ord("y"), ord("z")]
    with pytest.raises(DataError, match=r"text\.txt: 'a' \(U\+0061\) at character 1 is not in the vocabulary"):
        merged(chars(path, sequence=2, vocabulary="b☃"))


def test_multibyte_characters_split_across_chunks_read_the_same(tmp_path, monkeypatch):
    path = write(tmp_path, TEXT)
    whole = merged(chars(path, sequence=20, stride=7))
    monkeypatch.setattr(chars_module, "CHUNK_BYTES", 5)  # cuts ☃ (3 bytes) and ö (2 bytes)
    chunks = list(chars(path, sequence=20, stride=7))
    assert len(chunks) > 10  # it streams: windows come out as the file is read
    pieces = merged(chunks)
    for section in ("inputs", "targets"):
        np.testing.assert_array_equal(pieces[section], whole[section])
    symbols = build_vocabulary(path)
    assert decode(whole["inputs"][0], symbols, "utf-8") == TEXT[:20]
    assert decode(whole["inputs"][3], symbols, "utf-8") == TEXT[21:41]


def test_bytes_and_replaced_undecodable_bytes(tmp_path):
    path = write(tmp_path, b"ab\xffab\xffab\xff")
    with pytest.raises(DataError, match=r"text\.txt: byte 2 is not valid utf-8 .*data.errors = \"replace\""):
        build_vocabulary(path)
    assert build_vocabulary(path, encoding="bytes").tolist() == [97, 98, 255]
    assert merged(chars(path, sequence=2, encoding="bytes"))["inputs"].tolist() == [[0, 1], [2, 0], [1, 2], [0, 1]]
    assert build_vocabulary(path, errors="replace").tolist() == [97, 98, 0xFFFD]


def test_undecodable_byte_offset_counts_from_the_file_start_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(chars_module, "CHUNK_BYTES", 4)
    path = write(tmp_path, "ab☃cdéf".encode() + b"\xc3(" + b"xyz")  # ☃ spans the first chunk boundary
    offset = len("ab☃cdéf".encode())
    with pytest.raises(DataError, match=rf"byte {offset} is not valid utf-8"):
        build_vocabulary(path)


@pytest.mark.parametrize("content, arguments, message", [
    ("", {}, r"empty\.txt: the file is empty"),
    ("abcdef", {"sequence": 6}, r"empty\.txt: 6 characters, too few for one window of data.sequence = 6"),
    ("abcdef", {"sequence": 0}, r"data.sequence and data.stride must be at least 1"),
    ("abcdef", {"target": "last"}, r"data.target must be"),
    ("abcdef", {"encoding": "klingon"}, r"empty\.txt: unknown encoding"),
])
def test_bad_input_is_one_error_naming_the_file(tmp_path, content, arguments, message):
    path = write(tmp_path, content, "empty.txt")
    with pytest.raises(DataError, match=message):
        merged(chars(path, **arguments))


def test_run_file_data_block_in_memory_and_streamed_into_blocks(tmp_path, monkeypatch):
    BlockDataset = pytest.importorskip("sigmann_data.blocks").BlockDataset  # the [data] blocks cache
    path = write(tmp_path, TEXT)
    cfg = {"extractor": "chars", "path": str(path), "sequence": 16, "stride": 5}
    dataset = dataset_from_config(cfg)
    assert dataset.section("inputs").shape == (len(dataset), 16)
    assert dataset.section("targets").shape == (len(dataset), 16, 1)
    monkeypatch.setattr(chars_module, "CHUNK_BYTES", 64)
    blocked = dataset_from_config({**cfg, "blocks": {"records": 10, "memory_budget": 2000}})
    assert isinstance(blocked, BlockDataset) and blocked.block_count > 3
    for section in ("inputs", "targets"):
        np.testing.assert_array_equal(blocked[:][section], dataset.section(section))
    assert plugins.get("extractor", "chars").distribution == "sigmann-text"


def test_encode_names_what_holds_an_unknown_character():
    symbols = np.array([ord(c) for c in "abc"])
    assert encode("cab", symbols, "utf-8", "--prime").tolist() == [2, 0, 1]
    with pytest.raises(DataError, match=r"--prime: 'd' \(U\+0064\) at character 1"):
        encode("ad", symbols, "utf-8", "--prime")


@pytest.mark.parametrize("handler_name", ["numpy", "cpu"])
def test_one_hot_layer_expands_indices_on_the_handler(handler_name):
    handler = create_handler(handler_name, dtype="float32", seed=0)
    layer = OneHot("x", [(3,)], classes=4)
    assert layer.output_shape == (3, 4) and layer.parameter_shapes == {}
    for indices in (np.array([[0, 3, 1], [2, 2, 0]], np.uint8), np.array([[0, 3, 1], [2, 2, 0]], np.float32)):
        out = layer.forward(handler, [handler.asarray(indices)], {}, ForwardContext(training=False))
        np.testing.assert_array_equal(out.to_numpy(), np.eye(4, dtype=np.float32)[indices.astype(int)])
        assert out.to_numpy().dtype == np.float32
    with pytest.raises(ShapeError, match=r"layer 'x': index 4 is not a whole number in 0..3"):
        layer.forward(handler, [handler.asarray(np.array([[0, 4, 1]]))], {}, ForwardContext(training=False))


def test_a_text_that_is_a_fifo_is_one_error_not_a_hang(tmp_path):
    """Opening a FIFO waits for a writer: the reader checks for a regular file first."""
    path = tmp_path / "input.txt"
    os.mkfifo(path)
    with pytest.raises(DataError, match=r"text file .*input.txt: cannot read it \(it is a FIFO \(named pipe\), not a "):
        build_vocabulary(path)

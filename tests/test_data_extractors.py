"""Extractors (CSV, NumPy, IDX, image folders, defaults), preprocessors, and bad input named by file and record."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from sigma_core.data import (
    DataError,
    Dataset,
    dataset_from_config,
    load_image_folder,
    load_numpy,
    normalise,
    one_hot,
    permute_axes,
    read_csv,
)
from sigma_core.data.csv_extractor import parse_columns
from sigma_core.errors import ConfigError

MNIST_DIR = Path("/work/shared/data/mnist")
IRIS_ROWS = "sepal,petal,x,y,species\n5.1,3.5,1.4,0.2,setosa\n4.9,3.0,1.4,0.2,versicolor\n\n4.7,3.2,1.3,0.2,virginica\n"


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGMA_DATA_DIR", str(tmp_path / "cache"))


def csv_file(tmp_path, text, name="data.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- CSV --------------------------------------------------------------------------


def test_column_specs_are_inclusive_ranges_like_the_original():
    assert parse_columns("0-3,6", 8) == [0, 1, 2, 3, 6]
    assert parse_columns([0, "2-3"], 5) == [0, 2, 3]
    assert parse_columns("0--2", 5) == [0, 1, 2, 3] and parse_columns(-1, 5) == [4]
    with pytest.raises(DataError, match=r"column spec 7 is outside the 5 columns"):
        parse_columns(7, 5)


def test_csv_sections_header_and_value_mapping(tmp_path):
    path = csv_file(tmp_path, IRIS_ROWS)
    (chunk,) = read_csv(path, {"inputs": "0-3", "targets": 4}, skip_header=1,
                        mappings={"4": ["setosa", "versicolor", "virginica"]})
    np.testing.assert_array_equal(chunk["inputs"][:, 0], [5.1, 4.9, 4.7])
    np.testing.assert_array_equal(chunk["targets"], [[0], [1], [2]])
    dataset = dataset_from_config({"source": "csv", "path": str(path), "skip_header": 1,
                                   "mappings": {"4": {"setosa": 2, "versicolor": 1, "virginica": 0}}, "one_hot": 3})
    np.testing.assert_array_equal(dataset.section("targets")[0], [0, 0, 1])  # default: last column is the target
    assert dataset.section("inputs").shape == (3, 4)


def test_csv_is_read_in_chunks(tmp_path):
    path = csv_file(tmp_path, "".join(f"{i},{i % 2}\n" for i in range(10)))
    chunks = list(read_csv(path, chunk_records=4))
    assert [len(c["inputs"]) for c in chunks] == [4, 4, 2]


def test_ragged_csv_row_names_file_and_line(tmp_path):
    path = csv_file(tmp_path, "1,2,3\n4,5,6\n7,8\n")
    with pytest.raises(DataError, match=r"data.csv line 3: 2 columns, expected 3 \(as on line 1\)"):
        list(read_csv(path))


def test_non_numeric_value_without_mapping_names_file_line_and_column(tmp_path):
    path = csv_file(tmp_path, IRIS_ROWS)
    with pytest.raises(DataError, match=r"data.csv line 2, column 4: 'setosa' is not a number and the column has no"):
        list(read_csv(path, skip_header=1))
    with pytest.raises(DataError, match=r"data.csv line 5, column 4: value 'virginica' is not in the column's mapping"):
        list(read_csv(path, skip_header=1, mappings={4: ["setosa", "versicolor"]}))


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match=r"cannot read CSV file .*absent.csv"):
        list(read_csv(tmp_path / "absent.csv"))
    with pytest.raises(DataError, match=r"file not found: .*absent.npy"):
        dataset_from_config({"source": "numpy", "path": str(tmp_path / "absent.npy")})


# --- NumPy, IDX, images, defaults -------------------------------------------------


def test_numpy_npy_and_npz_without_pickle(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6).reshape(3, 2))
    assert load_numpy(tmp_path / "x.npy").section("inputs").shape == (3, 2)
    np.savez(tmp_path / "d.npz", x=np.ones((4, 2)), y=np.arange(4))
    dataset = load_numpy(tmp_path / "d.npz", {"inputs": "x", "targets": "y"})
    assert dataset.section_names == ("inputs", "targets")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"cannot read NumPy file .*objects.npy.*pickle"):
        load_numpy(tmp_path / "objects.npy")


def idx_file(path, code, shape, payload):
    path.write_bytes(bytes([0, 0, code, len(shape)]) + struct.pack(f">{len(shape)}I", *shape) + payload)
    return path


def test_idx_extractor_pairs_images_and_labels(tmp_path):
    images = idx_file(tmp_path / "img", 0x08, (3, 2, 2), bytes(range(12)))
    labels = idx_file(tmp_path / "lab", 0x08, (3,), bytes([1, 0, 2]))
    dataset = dataset_from_config({"source": "idx", "path": str(images), "targets_path": str(labels), "one_hot": 3})
    assert dataset.section("inputs").shape == (3, 2, 2) and dataset.section("targets").shape == (3, 3)
    short = idx_file(tmp_path / "short-idx", 0x08, (4, 2, 2), bytes(10))
    with pytest.raises(DataError, match=r"short-idx is truncated: shape \(4, 2, 2\) .* needs 16 data bytes .* found 10"):
        dataset_from_config({"source": "idx", "path": str(short)})


def test_image_folder_one_class_per_subfolder(tmp_path):
    image = pytest.importorskip("PIL.Image")
    for label, name in enumerate(["cat", "dog"]):
        (tmp_path / "pets" / name).mkdir(parents=True)
        for i in range(2):
            image.fromarray(np.full((4, 5), 50 * label + i, np.uint8)).save(tmp_path / "pets" / name / f"{i}.png")
    dataset = load_image_folder(tmp_path / "pets")
    assert dataset.section("inputs").shape == (4, 4, 5) and dataset.section("targets").tolist() == [0, 0, 1, 1]
    resized = dataset_from_config({"source": "image_folder", "path": str(tmp_path / "pets"), "size": [3, 2]})
    assert resized.section("inputs").shape == (4, 2, 3)


def test_image_folder_without_pillow_says_how_to_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)  # makes ``import PIL`` fail
    (tmp_path / "a").mkdir()
    with pytest.raises(DataError, match=r"needs Pillow: pip install Pillow"):
        load_image_folder(tmp_path)


@pytest.mark.parametrize("name, records", [("iris", 150), ("wdbc", 569), ("breast_cancer", 569), ("digits", 1797),
                                           ("xor", 4), ("and", 4)])
def test_default_datasets_by_name(name, records):
    assert len(dataset_from_config({"source": name})) == records


@pytest.mark.skipif(not MNIST_DIR.is_dir(), reason=f"MNIST test set not present at {MNIST_DIR}")
def test_mnist_default_from_a_local_folder_is_uint8_with_known_label_counts():
    mnist = dataset_from_config({"source": "mnist", "directory": str(MNIST_DIR), "train": False, "scale": False})
    images = mnist.section("inputs")
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    counts = np.bincount(mnist.section("targets"), minlength=10)
    assert counts.tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_mnist_default_downloads_with_checksums_into_the_data_dir(tmp_path, monkeypatch):
    from sigma_core.data import defaults

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    idx_file(mirror / "t10k-images-idx3-ubyte", 0x08, (2, 28, 28), bytes(2 * 784))
    idx_file(mirror / "t10k-labels-idx1-ubyte", 0x08, (2,), bytes([3, 4]))
    import gzip
    import hashlib

    checksums = {}
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        data = gzip.compress((mirror / stem).read_bytes())
        (mirror / f"{stem}.gz").write_bytes(data)
        checksums[f"{stem}.gz"] = hashlib.md5(data).hexdigest()
    monkeypatch.setattr(defaults, "MNIST_MD5", checksums)
    monkeypatch.setattr(defaults, "MNIST_MIRRORS", ((tmp_path / "down").as_uri() + "/", mirror.as_uri() + "/"))
    dataset = defaults.mnist(train=False)
    assert dataset.section("targets").tolist() == [3, 4]
    assert (tmp_path / "cache" / "mnist" / "t10k-labels-idx1-ubyte.gz").is_file()
    with pytest.raises(DataError, match=r"MNIST files not found in .*train-images"):
        defaults.mnist(train=True, download=False)


# --- preprocessors ----------------------------------------------------------------


def test_normalise_fixed_range_and_adaptive_per_feature():
    np.testing.assert_allclose(normalise(np.arange(1, 10.0), input_range=(1, 9)), np.arange(9) / 8)
    np.testing.assert_allclose(normalise(np.array([0, 255.0]), -1, 1, input_range=(0, 255)), [-1, 1])
    per_feature = normalise(np.array([[0.0, 10], [5, 30]]), per_feature=True)
    np.testing.assert_allclose(per_feature, [[0, 0], [1, 1]])


def test_one_hot_label_outside_range_names_label_and_record():
    np.testing.assert_array_equal(one_hot(np.array([0, 2, 1]), 3)[:2], [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(DataError, match=r"targets: label 7 of record 2 is outside 0..2"):
        one_hot(np.array([[0.0], [1.0], [7.0]]), 3, name="targets")
    with pytest.raises(DataError, match=r"record 1 has label 1.5, not a whole number"):
        one_hot(np.array([0.0, 1.5]), 3)


def test_shuffle_keeps_sections_aligned_and_is_seeded():
    dataset = Dataset({"inputs": np.arange(50.0)[:, None], "targets": np.arange(50)})
    shuffled = dataset_from_config({"source": "xor", "preprocess": [{"shuffle": 3}]})
    assert len(shuffled) == 4
    a, b = dataset.shuffle(5), dataset.shuffle(5)
    np.testing.assert_array_equal(a.section("inputs")[:, 0], a.section("targets"))
    np.testing.assert_array_equal(a.section("targets"), b.section("targets"))
    assert not np.array_equal(a.section("targets"), np.arange(50))


def test_permute_axes_of_each_record():
    assert permute_axes(np.zeros((2, 4, 5, 3)), (2, 0, 1)).shape == (2, 3, 4, 5)
    with pytest.raises(DataError, match="not a permutation"):
        permute_axes(np.zeros((2, 4, 5)), (0, 2))


def test_config_preprocess_steps():
    digits = dataset_from_config({"source": "digits", "preprocess": [
        {"normalise": {"range": [0, 1], "input_range": [0, 16]}}, {"permute": [0]}]})
    assert digits.section("inputs").max() == 1.0
    iris = dataset_from_config({"source": "iris", "preprocess": [{"normalise": {"per_feature": True}}]})
    np.testing.assert_allclose(iris.section("inputs").max(axis=0), 1)
    with pytest.raises(ConfigError, match=r"data.preprocess.normalise.input_range must be \[min, max\]"):
        dataset_from_config({"source": "iris", "preprocess": [{"normalise": {"input_range": 3}}]})

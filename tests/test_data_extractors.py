"""The core's extractors (CSV, NumPy, synthetic), preprocessors, and bad input named by file and record."""

from __future__ import annotations

import numpy as np
import pytest

from sigma_core.data import (
    DataError,
    Dataset,
    Preprocessing,
    dataset_from_config,
    load_numpy,
    one_hot,
)
from sigmann_csv import parse_columns, read_csv
from sigma_core.errors import ConfigError

IRIS_ROWS = "sepal,petal,x,y,species\n5.1,3.5,1.4,0.2,setosa\n4.9,3.0,1.4,0.2,versicolor\n\n4.7,3.2,1.3,0.2,virginica\n"


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
    dataset = dataset_from_config({"extractor": "csv", "path": str(path), "skip_header": 1,
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
        dataset_from_config({"extractor": "npy", "path": str(tmp_path / "absent.npy")})


# --- NumPy, IDX, synthetic --------------------------------------------------------


def test_numpy_npy_and_npz_without_pickle(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6).reshape(3, 2))
    assert load_numpy(tmp_path / "x.npy").section("inputs").shape == (3, 2)
    np.savez(tmp_path / "d.npz", x=np.ones((4, 2)), y=np.arange(4))
    dataset = load_numpy(tmp_path / "d.npz", {"inputs": "x", "targets": "y"})
    assert dataset.section_names == ("inputs", "targets")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"cannot read NumPy file .*objects.npy.*pickle"):
        load_numpy(tmp_path / "objects.npy")


@pytest.mark.parametrize("name, records", [("xor", 4), ("and", 4)])
def test_core_datasets_by_name(name, records):
    assert len(dataset_from_config({"source": name})) == records


# --- preprocessors ----------------------------------------------------------------


def normalised(inputs, **table) -> np.ndarray:
    """``inputs`` through a ``normalise`` transform of ``table``, fitted to them."""
    return Preprocessing([{"normalise": table}])(Dataset({"inputs": inputs}), fit=True).section("inputs")


def test_normalise_fixed_range_and_adaptive_per_feature():
    np.testing.assert_allclose(normalised(np.arange(1, 10.0)[:, None], input_range=[1, 9])[:, 0], np.arange(9) / 8)
    np.testing.assert_allclose(normalised(np.array([[0], [255.0]]), range=[-1, 1], input_range=[0, 255]), [[-1], [1]])
    per_feature = normalised(np.array([[0.0, 10], [5, 30]]), per_feature=True)
    np.testing.assert_allclose(per_feature, [[0, 0], [1, 1]])
    with pytest.raises(ConfigError, match=r"data.preprocess.normalise.range: 1 must be below 0"):
        Preprocessing([{"normalise": [1, 0]}])


def test_one_hot_label_outside_range_names_label_and_record():
    np.testing.assert_array_equal(one_hot(np.array([0, 2, 1]), 3)[:2], [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(DataError, match=r"targets: label 7 of record 2 is outside 0..2"):
        one_hot(np.array([[0.0], [1.0], [7.0]]), 3, name="targets")
    with pytest.raises(DataError, match=r"record 1 has label 1.5, not a whole number"):
        one_hot(np.array([0.0, 1.5]), 3)


def test_shuffle_keeps_sections_aligned_and_is_seeded():
    dataset = Dataset({"inputs": np.arange(50.0)[:, None], "targets": np.arange(50)})
    shuffled = dataset_from_config({"extractor": "xor", "preprocess": [{"shuffle": 3}]})
    assert len(shuffled) == 4
    a, b = dataset.shuffle(5), dataset.shuffle(5)
    np.testing.assert_array_equal(a.section("inputs")[:, 0], a.section("targets"))
    np.testing.assert_array_equal(a.section("targets"), b.section("targets"))
    assert not np.array_equal(a.section("targets"), np.arange(50))


def test_permute_axes_of_each_record():
    assert Preprocessing([{"permute": [2, 0, 1]}]).inputs(np.zeros((2, 4, 5, 3))).shape == (2, 3, 4, 5)
    with pytest.raises(DataError, match=r"data.preprocess.permute: \[0, 2\] is not a permutation"):
        Preprocessing([{"permute": [0, 2]}]).inputs(np.zeros((2, 4, 5)))


def test_config_preprocess_steps():
    digits = dataset_from_config({"extractor": "digits", "preprocess": [
        {"normalise": {"range": [0, 1], "input_range": [0, 16]}}, {"permute": [0]}]})
    assert digits.section("inputs").max() == 1.0
    iris = dataset_from_config({"extractor": "iris", "preprocess": [{"normalise": {"per_feature": True}}]})
    np.testing.assert_allclose(iris.section("inputs").max(axis=0), 1)
    with pytest.raises(ConfigError, match=r"data.preprocess.normalise.input_range: expected \[min, max\]"):
        dataset_from_config({"extractor": "iris", "preprocess": [{"normalise": {"input_range": 3}}]})


def test_streamed_statistics_match_numpy_whatever_the_chunking():
    from sigma_core import Range
    from sigmann_transforms.transforms import Moments

    values = np.random.default_rng(2).normal(1e6, 3.0, (1000, 3))
    moments, limits = Moments(), Range(per_feature=True)
    for chunk in np.array_split(values, [1, 2, 300, 301, 999]):
        moments.update(chunk)
        limits.update(chunk)
    np.testing.assert_allclose(moments.mean, values.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(moments.std, values.std(axis=0), rtol=1e-9)
    np.testing.assert_array_equal(limits.bounds[0], values.min(axis=0))
    np.testing.assert_array_equal(limits.bounds[1], values.max(axis=0))

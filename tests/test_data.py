"""The minimal data path: datasets, iterators, loaders and run-file configs."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from sigma_core.data import (
    DataError,
    Dataset,
    MinibatchIterator,
    UndividedIterator,
    and_,
    dataset_from_config,
    from_arrays,
    synthetic_classification,
    xor,
)
from sigma_core import config, plugins
from sigma_core.errors import ConfigError, SigmaError


def numbered(n: int) -> Dataset:
    """Records whose target is their input, so misalignment is visible."""
    inputs = np.arange(n, dtype=np.float64).reshape(n, 1) * np.ones((1, 3))
    return Dataset({"inputs": inputs, "targets": np.arange(n)}, "numbered")


def assert_aligned(batch):
    np.testing.assert_array_equal(batch["inputs"][:, 0], batch["targets"])


# --- Dataset --------------------------------------------------------------


def test_misaligned_sections_name_the_sections_and_lengths():
    with pytest.raises(SigmaError, match=r"'inputs' has 5, 'targets' has 4"):
        Dataset({"inputs": np.zeros((5, 2)), "targets": np.zeros(4)})


def test_indexing_returns_every_section():
    dataset = numbered(10)
    assert len(dataset) == 10 and dataset.section_names == ("inputs", "targets")
    batch = dataset[np.array([7, 2])]
    assert set(batch) == {"inputs", "targets"}
    np.testing.assert_array_equal(batch["targets"], [7, 2])
    assert_aligned(batch)


def test_split_sizes_and_shuffled_records_stay_aligned():
    train, test = numbered(1797).split(0.8, 0.2, seed=3)
    assert (len(train), len(test)) == (1437, 360)
    assert_aligned(train[:])
    assert_aligned(test[:])
    assert not np.array_equal(train.section("targets")[:10], np.arange(10))  # actually shuffled
    together = np.concatenate([train.section("targets"), test.section("targets")])
    np.testing.assert_array_equal(np.sort(together), np.arange(1797))  # disjoint and complete


def test_split_fractions_are_validated_and_may_leave_records_out():
    a, b, c = numbered(10).split(0.7, 0.2, 0.1, shuffle=False)
    assert [len(a), len(b), len(c)] == [7, 2, 1]
    (half,) = numbered(10).split(0.5)
    assert len(half) == 5
    with pytest.raises(DataError, match="sum to at most 1"):
        numbered(10).split(0.8, 0.3)


def test_take_slices_first_and_last_records():
    dataset = numbered(10_000)
    first, last = dataset.take(0, 8000), dataset.take(-2000)
    assert (len(first), len(last)) == (8000, 2000)
    assert last.section("targets")[0] == 8000


def test_one_hot_and_from_arrays():
    dataset = from_arrays(np.zeros((3, 2)), np.array([0, 2, 1]), one_hot=3)
    np.testing.assert_array_equal(dataset.section("targets"), [[1, 0, 0], [0, 0, 1], [0, 1, 0]])
    with pytest.raises(DataError, match=r"section 'targets': label 3 of record 1 is outside 0..2"):
        from_arrays(np.zeros((2, 2)), np.array([0, 3]), one_hot=3)


# --- Iterators ------------------------------------------------------------


def epoch_targets(iterator):
    return [batch["targets"].copy() for batch in iterator]


def test_minibatches_cover_every_record_once_per_epoch():
    iterator = MinibatchIterator(numbered(103), 10, seed=1)
    assert len(iterator) == 11
    batches = [batch for batch in iterator]
    assert [len(b["targets"]) for b in batches] == [10] * 10 + [3]
    for batch in batches:
        assert_aligned(batch)
    np.testing.assert_array_equal(np.sort(np.concatenate([b["targets"] for b in batches])), np.arange(103))


def test_minibatches_are_reproducible_per_seed_and_differ_across_epochs():
    first, second = MinibatchIterator(numbered(50), 8, seed=7), MinibatchIterator(numbered(50), 8, seed=7)
    epoch0, epoch1 = epoch_targets(first), epoch_targets(first)
    assert all(np.array_equal(a, b) for a, b in zip(epoch0, epoch_targets(second)))
    assert not np.array_equal(np.concatenate(epoch0), np.concatenate(epoch1))
    other_seed = epoch_targets(MinibatchIterator(numbered(50), 8, seed=8))
    assert not np.array_equal(np.concatenate(epoch0), np.concatenate(other_seed))
    fresh = MinibatchIterator(numbered(50), 8, seed=7)
    fresh.set_epoch(1)
    assert all(np.array_equal(a, b) for a, b in zip(epoch1, epoch_targets(fresh)))


def test_state_resumes_mid_epoch():
    iterator = MinibatchIterator(numbered(40), 8, seed=2)
    expected = epoch_targets(MinibatchIterator(numbered(40), 8, seed=2))
    for position, _ in enumerate(iterator, start=1):
        if position == 3:
            break
    assert iterator.state() == {"epoch": 0, "position": 3}
    resumed = MinibatchIterator(numbered(40), 8, seed=2)
    resumed.set_state(iterator.state())
    rest = epoch_targets(resumed)
    assert len(rest) == 2 and all(np.array_equal(a, b) for a, b in zip(expected[3:], rest))
    assert resumed.state() == {"epoch": 1, "position": 0}


def test_last_batch_drop_and_unshuffled_order():
    iterator = MinibatchIterator(numbered(103), 10, shuffle=False, last_batch="drop")
    batches = epoch_targets(iterator)
    assert len(iterator) == len(batches) == 10
    np.testing.assert_array_equal(np.concatenate(batches), np.arange(100))
    with pytest.raises(DataError, match="no batch of size 200"):
        MinibatchIterator(numbered(103), 200, last_batch="drop")


def test_undivided_yields_whole_dataset_once_per_epoch():
    iterator = UndividedIterator(numbered(17))
    assert len(iterator) == 1
    for _ in range(2):
        (batch,) = list(iterator)
        np.testing.assert_array_equal(batch["targets"], np.arange(17))
    assert iterator.state() == {"epoch": 2, "position": 0}


# --- Loaders --------------------------------------------------------------


def test_synthetic_datasets():
    np.testing.assert_array_equal(xor().section("targets")[:, 0], [0, 1, 1, 0])
    np.testing.assert_array_equal(and_().section("targets")[:, 0], [0, 0, 0, 1])
    assert xor().section("inputs").shape == (4, 2)
    data = synthetic_classification(32, (3, 4), classes=5, seed=1)
    assert data.section("inputs").shape == (32, 3, 4) and data.section("targets").max() < 5
    np.testing.assert_array_equal(data.section("inputs"), synthetic_classification(32, (3, 4), 5, 1).section("inputs"))


# --- Run-file configs -----------------------------------------------------


def test_config_sources_and_preprocessing(tmp_path):
    assert len(dataset_from_config({"extractor": "xor"})) == 4
    digits = dataset_from_config({"extractor": "sklearn", "name": "digits", "preprocess": [{"normalise": [0, 1]}],
                                  "one_hot": 10})
    assert digits.section("inputs").min() == 0 and digits.section("inputs").max() == 1
    assert digits.section("targets").shape == (1797, 10)
    iris = dataset_from_config({"extractor": "sklearn", "name": "iris", "preprocess": {"standardise": True}})
    np.testing.assert_allclose(iris.section("inputs").mean(axis=0), 0, atol=1e-9)
    np.savez(tmp_path / "d.npz", x=np.ones((5, 2)), y=np.arange(5))
    npz = dataset_from_config({"extractor": "npz", "path": str(tmp_path / "d.npz"), "inputs": "x", "targets": "y"})
    np.testing.assert_array_equal(npz.section("targets"), np.arange(5))


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"extractor": "parquet"}, r"data.extractor: unknown extractor 'parquet' \(available: and, .*csv, .*xor\)"),
        ({"name": "digits"}, r"data.extractor is missing"),
        ({"extractor": "sklearn", "name": "digits", "nmae": 1}, r"unknown key data.nmae .*allowed: .*name"),
        ({"extractor": "sklearn"}, r"data.name is required"),
        ({"extractor": "xor", "preprocess": [{"whiten": True}]},
         r"data.preprocess: unknown transform 'whiten' \(available: normalise, permute, shuffle, standardise\)"),
        ({"extractor": "xor", "preprocess": [{"normalise": 1}]}, r"data.preprocess.normalise must be \[min, max\]"),
    ],
)
def test_config_errors_name_the_key(cfg, message):
    with pytest.raises(ConfigError, match=message):
        dataset_from_config(cfg)


def test_config_npz_missing_array_names_the_key(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.ones((5, 2)), y=np.arange(5))
    with pytest.raises(ConfigError, match=r"data.targets: .*no array 'labels'"):
        dataset_from_config({"extractor": "npz", "path": str(tmp_path / "d.npz"), "inputs": "x", "targets": "labels"})


# --- Paths: the core reads local files; URLs, archives, checksums and [data] blocks go through plugins ---------


@pytest.mark.parametrize("path, extra, message", [
    ("https://example.org/a.csv", {}, "'https://example.org/a.csv' is a URL: no 'https' source is installed to "
                                      "download it"),
    (["a.csv", "b.csv"], {}, "['a.csv', 'b.csv'] is a list of fallbacks: no 'file' source is installed to try them"),
    ("a.csv.gz", {}, "'a.csv.gz' is compressed: no 'file' source is installed to unpack it"),
    ("a.csv", {"md5": "0" * 32}, "'a.csv' is given with a checksum: no 'file' source is installed to check it"),
    ("s3://bucket/a.csv", {}, "'s3://bucket/a.csv' is a URL: no 's3' source is installed to download it"),
])
def test_without_a_source_plugin_a_path_the_core_cannot_read_is_one_line(monkeypatch, path, extra, message):
    monkeypatch.setenv("SIGMA_PLUGINS", "csv")  # the core and an extractor that reads files, no sources
    plugins.reset()
    with pytest.raises(DataError) as caught:
        dataset_from_config({"extractor": "csv", "path": path, **extra})
    # The core names no distribution: the README's table says which plugin provides a source.
    assert str(caught.value) == f"data.path {message} (installed sources: none); {plugins.MORE}"


def test_the_core_reads_a_local_path_and_names_a_missing_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGMA_PLUGINS", "csv")  # the core and an extractor that reads files
    plugins.reset()
    (tmp_path / "a.csv").write_text("1,2,0\n3,4,1\n")
    assert len(dataset_from_config({"extractor": "csv", "path": str(tmp_path / "a.csv")})) == 2
    with pytest.raises(DataError, match=r"^data.path: file not found: .*gone.csv$"):
        dataset_from_config({"extractor": "csv", "path": str(tmp_path / "gone.csv")})
    monkeypatch.chdir(tmp_path)  # a relative path says where it was looked for, and relative to what
    with pytest.raises(DataError) as caught:
        dataset_from_config({"extractor": "csv", "path": "data/gone.csv"})
    assert str(caught.value) == (f"data.path: file not found: data/gone.csv (looked for {tmp_path}/data/gone.csv: "
                                 f"a relative path is relative to the working directory, {tmp_path})")
    with pytest.raises(ConfigError, match=r"^data.blocks needs a cache registered as 'blocks', and none is installed; "
                                          r"docs/distributions.md lists the plugins that provide more$"):
        dataset_from_config({"extractor": "csv", "path": str(tmp_path / "a.csv"), "blocks": {"records": 1}})


def test_a_plugin_source_resolves_its_scheme(fake_site, tmp_path):
    (tmp_path / "bucket.csv").write_text("1,2,0\n3,4,1\n5,6,0\n")
    fake_site.add("sigmann-s3", entry_points={"s3": "s3_source"}, modules={"s3_source": f"""
        from pathlib import Path
        from sigma_core import hookimpl

        def fetch(value, md5=None, sha256=None):
            assert value == "s3://bucket/x.csv" and md5 == "abc"
            return Path({str(tmp_path / "bucket.csv")!r})

        @hookimpl
        def register_sources(register):
            register("s3", fetch)
    """})
    plugins.reset()
    assert len(dataset_from_config({"extractor": "csv", "path": "s3://bucket/x.csv", "md5": "abc"})) == 3


def test_the_older_data_source_key_is_read_as_extractor_with_a_one_line_note(sigma_run_file, caplog):
    path = sigma_run_file()
    text = path.read_text()
    assert "extractor = " in text
    path.write_text(text.replace("extractor = ", "source = ", 1))
    with caplog.at_level("WARNING", logger="sigma"):
        cfg = config.load(path)
    assert "source" not in cfg["data"] and cfg["data"]["extractor"] == tomllib.loads(text)["data"]["extractor"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: [data] source = {cfg['data']['extractor']!r} is read as extractor = {cfg['data']['extractor']!r} "
        "(its newer name)"]
    path.write_text(text.replace("extractor = ", "source = 'xor'\nextractor = ", 1))
    with pytest.raises(ConfigError, match="data.source is the older name of data.extractor; give only extractor"):
        config.load(path)

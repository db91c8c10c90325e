"""Block-wise datasets on a disk cache, within a memory budget, and the run file's ``[data] blocks``."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from sigma_core import ConfigError, DataError
from sigma_core.atomic import PARTIAL
from sigma_core.data import MinibatchIterator, UndividedIterator, dataset_from_config
from sigmann_data.blocks import BlockDataset, build_blocks, is_built

FEATURES = 256  # float64: 2 KiB per record


def numbered_chunks(records: int, chunk: int = 100):
    """Records whose every input equals its target, produced lazily in chunks."""
    for start in range(0, records, chunk):
        ids = np.arange(start, min(records, start + chunk))
        yield {"inputs": np.repeat(ids[:, None].astype(np.float64), FEATURES, 1), "targets": ids}


def assert_aligned(batch):
    np.testing.assert_array_equal(batch["inputs"][:, 0], batch["targets"])
    np.testing.assert_array_equal(batch["inputs"][:, -1], batch["targets"])


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGMA_DATA_DIR", str(tmp_path / "cache"))


def test_epoch_over_a_dataset_four_times_the_budget_stays_within_it(tmp_path):
    budget = 4 << 20
    records = 4 * budget // (FEATURES * 8)  # 16 MiB of inputs
    def traced_peak(work):
        """Peak bytes allocated (NumPy's data buffers included) while ``work`` runs."""
        tracemalloc.start()
        try:
            result = work()
            return result, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def epoch(name="big"):
        dataset = BlockDataset(tmp_path / name, budget)
        seen = []
        for batch in MinibatchIterator(dataset, 64, seed=1):
            assert (batch["inputs"][:, 0] == batch["targets"]).all()  # not np.testing: its imports would count
            seen.append(batch["targets"])
        return seen

    # One small round first, so the modules NumPy imports on first use are not counted as data.
    build_blocks(numbered_chunks(300), tmp_path / "small", block_records=200)
    epoch("small")
    _, build_peak = traced_peak(lambda: build_blocks(numbered_chunks(records), tmp_path / "big", block_records=200))
    seen, epoch_peak = traced_peak(epoch)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(records))
    assert records * FEATURES * 8 >= 4 * budget
    assert build_peak < budget and epoch_peak < budget, (build_peak, epoch_peak, budget)
    print(f"peak bytes: build {build_peak:,}, epoch {epoch_peak:,}, budget {budget:,}, data {records * FEATURES * 8:,}")


def test_blocks_fetch_in_any_order_and_refetch_the_same_values(tmp_path):
    build_blocks(numbered_chunks(25, chunk=7), tmp_path / "b", block_records=10)
    dataset = BlockDataset(tmp_path / "b", 1 << 20)
    assert dataset.block_count == 3 and len(dataset) == 25
    batch = dataset[np.array([24, 3, 13])]
    np.testing.assert_array_equal(batch["targets"], [24, 3, 13])
    assert_aligned(batch)
    np.testing.assert_array_equal(dataset[slice(8, 12)]["targets"], [8, 9, 10, 11])


def test_record_wise_and_block_wise_splits(tmp_path):
    build_blocks(numbered_chunks(100), tmp_path / "b", block_records=10)
    dataset = BlockDataset(tmp_path / "b", 1 << 20)
    train, test = dataset.split(0.8, 0.2, seed=3)
    assert (len(train), len(test)) == (80, 20)
    together = np.concatenate([train[:]["targets"], test[:]["targets"]])
    np.testing.assert_array_equal(np.sort(together), np.arange(100))
    first, second = dataset.split_blocks(0.7, 0.3)
    np.testing.assert_array_equal(first[:]["targets"], np.arange(70))
    np.testing.assert_array_equal(second.take(0, 3)[:]["targets"], [70, 71, 72])


def test_blocks_too_big_for_the_budget_are_refused(tmp_path):
    build_blocks(numbered_chunks(50), tmp_path / "b", block_records=50)
    with pytest.raises(DataError, match=r"a block takes 102800 bytes, more than half the memory budget of 100000"):
        BlockDataset(tmp_path / "b", 100_000)


def test_failed_extraction_leaves_no_cache(tmp_path):
    def failing():
        yield from numbered_chunks(30, chunk=10)
        raise DataError("bad.csv line 31: 2 columns, expected 3")

    with pytest.raises(DataError, match="bad.csv line 31"):
        build_blocks(failing(), tmp_path / "b", block_records=10)
    assert not is_built(tmp_path / "b") and not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if PARTIAL in p.name]


def test_stale_block_cache_folders_are_removed_when_blocks_are_built(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid: a process that is gone
    stale = tmp_path / f".old-cache{PARTIAL}{child.pid}-0123abcd"
    live = tmp_path / f".other-cache{PARTIAL}{os.getpid()}-0123abcd"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "block-00000.inputs.npy").write_bytes(b"partial")
    build_blocks([{"inputs": np.zeros((4, 2))}], tmp_path / "cache", block_records=2)
    assert not stale.exists() and live.exists()


def test_config_blocks_cache_a_csv_and_reuse_it(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("".join(f"{i},{i * 2},{i % 3}\n" for i in range(50)))
    cfg = {"extractor": "csv", "path": str(path), "chunk_records": 7, "one_hot": 3,
           "preprocess": [{"normalise": {"input_range": [0, 100]}}],
           "blocks": {"records": 16, "memory_budget": 1 << 20}}
    dataset = dataset_from_config(cfg)
    assert isinstance(dataset, BlockDataset) and dataset.block_count == 4
    np.testing.assert_allclose(dataset[np.array([49])]["inputs"], [[0.49, 0.98]])
    assert dataset[np.array([49])]["targets"].tolist() == [[0, 1, 0]]
    stamp = (dataset.directory / "manifest.json").stat().st_mtime_ns
    assert (dataset_from_config(cfg).directory / "manifest.json").stat().st_mtime_ns == stamp
    with pytest.raises(ConfigError, match=r"data.preprocess.shuffle needs the whole dataset"):
        dataset_from_config({**cfg, "preprocess": [{"shuffle": 3}]})
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,0\n3,4\n")
    with pytest.raises(DataError, match=r"bad.csv line 2"):
        dataset_from_config({**cfg, "path": str(bad), "preprocess": []})
    assert not list((tmp_path / "cache" / "blocks").glob(f"*{PARTIAL}*"))


# --- fitted preprocessing across blocks -------------------------------------------


def varied_csv(path, records=203, seed=4):
    """Features on very different scales and offsets (one constant), plus a class column."""
    rng = np.random.default_rng(seed)
    columns = [rng.normal(1e4, 0.5, records), rng.uniform(-3, 7, records), np.full(records, 2.5),
               rng.exponential(100, records), rng.integers(0, 3, records)]
    path.write_text("".join(",".join(repr(float(v)) for v in row) + "\n" for row in zip(*columns)))
    return path


@pytest.mark.parametrize("preprocess, exact", [
    ([{"normalise": [0, 1]}], True),
    ([{"normalise": {"range": [-1, 1], "per_feature": True}}], True),
    ([{"standardise": True}], False),
    ([{"normalise": {"per_feature": True}}, {"standardise": True}], False),
    ([{"standardise": True}, {"normalise": {"range": [0, 2], "per_feature": True}}], False),
])
def test_fitted_preprocessing_over_blocks_equals_the_in_memory_result(tmp_path, preprocess, exact):
    cfg = {"extractor": "csv", "path": str(varied_csv(tmp_path / "v.csv")), "chunk_records": 13, "one_hot": 3,
           "sections": {"inputs": "0-3", "targets": 4}, "preprocess": preprocess}
    memory = dataset_from_config(cfg)
    blocks = dataset_from_config({**cfg, "blocks": {"records": 32, "memory_budget": 1 << 20}})
    assert isinstance(blocks, BlockDataset) and blocks.block_count == 7
    merged = blocks[slice(None)]
    assert merged["inputs"].dtype == memory.section("inputs").dtype
    np.testing.assert_array_equal(merged["targets"], memory.section("targets"))
    if exact:  # min and max do not round, so neither does the rescaling
        np.testing.assert_array_equal(merged["inputs"], memory.section("inputs"))
    else:
        np.testing.assert_allclose(merged["inputs"], memory.section("inputs"), rtol=1e-5, atol=1e-5)
    if preprocess[-1] == {"standardise": True}:
        np.testing.assert_allclose(merged["inputs"].mean(axis=0), 0, atol=1e-4)
        np.testing.assert_allclose(merged["inputs"].std(axis=0), [1, 1, 0, 1], atol=1e-4)
    cached = list((tmp_path / "cache" / "blocks").iterdir())
    assert len(cached) == 1 and PARTIAL not in cached[0].name  # the staged raw blocks are gone


def test_fitting_streams_over_blocks_of_a_dataset_four_times_the_budget(tmp_path):
    features, budget = 64, 256 << 10
    records = 4 * budget // (features * 8)  # 4x the budget in float64 inputs
    rng = np.random.default_rng(0)
    path = tmp_path / "big.csv"
    path.write_text("".join(",".join(f"{v:.4f}" for v in row) + ",1\n" for row in rng.normal(5, 2, (records, features))))
    cfg = {"extractor": "csv", "path": str(path), "chunk_records": 10,
           "sections": {"inputs": f"0-{features - 1}", "targets": features},
           "preprocess": [{"standardise": True}, {"normalise": {"per_feature": True}}],
           "blocks": {"records": 16, "memory_budget": budget}}
    # A first, small build so the modules imported on first use are not counted as data.
    dataset_from_config({**cfg, "path": str(varied_csv(tmp_path / "small.csv")), "sections": {"inputs": "0-3", "targets": 4}})
    tracemalloc.start()
    try:
        dataset = dataset_from_config(cfg)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(dataset) == records
    # One staged block, its transformed copies and the block being written at a time; never the whole data.
    assert peak < budget, (peak, budget)


# --- iterators over blocks ----------------------------------------------------------


def sigma_iterator_dataset(tmp_path):
    """Sigma's iterator test data: 5.1, 4.9, 4.7 in blocks of two records."""
    chunks = [{"inputs": np.array([[5.1], [4.9], [4.7]]), "targets": np.array([0, 1, 2])}]
    return BlockDataset(build_blocks(chunks, tmp_path / "three", block_records=2), 1 << 20)


def test_undivided_iterator_yields_each_block_whole(tmp_path):
    iterator = UndividedIterator(sigma_iterator_dataset(tmp_path))
    batches = [batch["inputs"][:, 0].tolist() for batch in iterator]
    assert len(iterator) == 2 and batches == [[5.1, 4.9], [4.7]]
    assert [batch["targets"].tolist() for batch in iterator] == [[0, 1], [2]]  # next epoch, same blocks

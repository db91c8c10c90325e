"""Bad data files are one line naming the file (issue 10 items 10 and 12), refused before allocating."""

from __future__ import annotations

import os
import re
import tracemalloc
import zipfile

import numpy as np
import pytest

from sigma_core import cli

from sigma_core.compute import memory
from sigma_core.data import DataError, dataset_from_config, load_npz, load_numpy, numpy_files
from sigmann_csv import extractor as csv_extractor, read_csv


def npy_header(shape, dtype="<f8") -> bytes:
    """The bytes of an .npy header claiming ``shape`` (np.save would need the array itself)."""
    import io

    stream = io.BytesIO()
    np.lib.format.write_array_header_1_0(stream, {"descr": dtype, "fortran_order": False, "shape": shape})
    return stream.getvalue()


def peak_bytes(function) -> int:
    """The most memory ``function`` held at once, while it raised DataError."""
    tracemalloc.start()
    try:
        with pytest.raises(DataError):
            function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- unreadable files and directories -------------------------------------------------------


@pytest.mark.parametrize("load", [load_numpy, lambda path: list(read_csv(path))])
def test_a_directory_where_a_file_belongs_is_named(tmp_path, load):
    folder = tmp_path / "data.bin"
    folder.mkdir()
    with pytest.raises(DataError, match=rf"{folder}: cannot read it \(it is a directory, not a regular file\)"):
        load(folder)


@pytest.mark.parametrize("load", [load_numpy, lambda path: list(read_csv(path))])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_is_refused_before_it_is_opened(tmp_path, load, kind):
    """Opening a FIFO waits for a writer and /dev/zero never ends: either would hang, so neither is opened."""
    path = tmp_path / "data.bin"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    what = "a FIFO" if kind == "fifo" else "a character device"
    with pytest.raises(DataError, match=rf"{path}: cannot read it \(it is {what}"):
        load(path)


@pytest.mark.parametrize("values", [np.array([["a", "b"]]), np.array([[1 + 2j, 0]]),
                                    np.array(["2020-01-01"], dtype="datetime64[D]")])
def test_an_array_of_what_is_not_a_real_number_is_refused(tmp_path, values):
    """Strings fail deep in training, complex numbers lose their imaginary part without a word: both are refused."""
    path = tmp_path / "data.npy"
    np.save(path, values)
    with pytest.raises(DataError, match=re.escape(f"{path}: the array has dtype {values.dtype}, not real numbers")):
        load_numpy(path)


@pytest.mark.parametrize("module, load", [(numpy_files, load_numpy), (csv_extractor, lambda path: list(read_csv(path)))])
def test_a_permission_error_is_named(tmp_path, monkeypatch, module, load):
    # Tests run as root, who may read anything: fail the open as a locked file would.
    def locked(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(module, "open", locked, raising=False)
    path = tmp_path / "locked.bin"
    path.write_bytes(b"1,2\n")
    with pytest.raises(DataError, match=rf"cannot read .* {path}: Permission denied"):
        load(path)


# --- .npy and .npz ------------------------------------------------------------------------------


def test_an_empty_npy_file(tmp_path):
    (tmp_path / "empty.npy").write_bytes(b"")
    with pytest.raises(DataError, match=r"cannot read NumPy file .*empty.npy: the array is empty"):
        load_numpy(tmp_path / "empty.npy")


def test_a_text_file_named_npy_is_not_blamed_on_pickle(tmp_path):
    (tmp_path / "notes.npy").write_text("1,2,3\n4,5,6\n")
    with pytest.raises(DataError) as caught:
        load_numpy(tmp_path / "notes.npy")
    assert "notes.npy: the array is not in NumPy's .npy format (the magic string is not correct" in str(caught.value)
    assert "pickle" not in str(caught.value)


def test_a_pickled_npz_member_is_refused_without_unpickling(tmp_path):
    np.savez(tmp_path / "objects.npz", fine=np.ones(3), objects=np.array([{"run": "code"}], dtype=object))
    with pytest.raises(DataError, match=r"objects.npz: array 'objects' holds pickled Python objects, which Sigma never"):
        load_numpy(tmp_path / "objects.npz")
    assert len(load_numpy(tmp_path / "objects.npz", {"inputs": "fine"})) == 3  # the other member is fine


def test_a_short_npz_member_is_refused_before_reading(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6.0))
    with zipfile.ZipFile(tmp_path / "short.npz", "w") as archive:
        archive.writestr("inputs.npy", (tmp_path / "x.npy").read_bytes()[:-8])
        archive.writestr("targets.npy", (tmp_path / "x.npy").read_bytes())
    with pytest.raises(DataError, match=r"short.npz: array 'inputs' claims shape \(6,\) of float64 \(48 bytes\), "
                                        r"but only 40 bytes follow its header"):
        load_npz(tmp_path / "short.npz")


@pytest.mark.parametrize("compressed", [False, True])
def test_a_header_claiming_far_more_than_the_file_allocates_nothing(tmp_path, compressed):
    claim = npy_header((10**12,)) + bytes(80)
    path = tmp_path / "claim.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as archive:
        archive.writestr("inputs.npy", claim)
    assert peak_bytes(lambda: load_numpy(path)) < 1_000_000
    with pytest.raises(DataError, match=r"claim.npz: array 'inputs' claims shape \(1000000000000,\) of float64 "
                                        r"\(8,000,000,000,000 bytes\), but only \d+ bytes follow its header"):
        load_numpy(path)


def test_an_array_larger_than_the_memory_available_is_refused(tmp_path, monkeypatch):
    np.save(tmp_path / "big.npy", np.zeros(1000))
    monkeypatch.setattr(memory, "available", lambda: 4000)
    with pytest.raises(DataError, match=r"big.npy: the array of shape \(1000,\) need 8,000 bytes, more than the 4,000"):
        load_numpy(tmp_path / "big.npy")


# --- non-finite values ---------------------------------------------------------------------------


def test_a_nan_cell_in_a_csv_names_the_file_and_line_unless_allowed(tmp_path):
    path = tmp_path / "values.csv"
    path.write_text("1,2,0\n3,nan,1\n5,6,0\n")
    with pytest.raises(DataError, match=rf"{path} line 2, column 1: 'nan' is not finite; set data.allow_non_finite"):
        dataset_from_config({"extractor": "csv", "path": str(path)})
    allowed = dataset_from_config({"extractor": "csv", "path": str(path), "allow_non_finite": True})
    assert np.isnan(allowed.section("inputs")[1, 1])


def test_non_finite_npy_values_are_refused_unless_allowed(tmp_path):
    np.save(tmp_path / "x.npy", np.array([[1.0, 2.0], [np.inf, 4.0]]))
    with pytest.raises(DataError, match=r"x.npy: the array holds inf at index \[1, 0\]"):
        load_numpy(tmp_path / "x.npy")
    assert load_numpy(tmp_path / "x.npy", allow_non_finite=True).section("inputs")[1, 0] == np.inf


def test_sigma_train_on_a_bad_data_file_prints_one_line(tmp_path, capsys):
    (tmp_path / "notes.npy").write_text("not an array")
    run_file = tmp_path / "run.toml"
    run_file.write_text(f"""
[data]
extractor = "numpy"  # the older name of the npy extractor, still read
path = "{tmp_path / 'notes.npy'}"
[[network.layers]]
type = "input"
shape = [1]
""")
    assert cli.main(["train", str(run_file), "--quiet"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: cannot read NumPy file {tmp_path / 'notes.npy'}: the array is not in NumPy's")

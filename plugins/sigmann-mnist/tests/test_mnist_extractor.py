"""sigmann-mnist: MNIST from a local folder, or downloaded once with checksums into the data dir."""

from __future__ import annotations

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest

from sigma_core import SigmaError, plugins
from sigma_core.data import DataError, dataset_from_config
from sigmann_mnist import mnist as mnist_module
from sigmann_mnist.mnist import load_mnist

MNIST_DIR = Path("/work/shared/data/mnist")  # the real test set, where this workplace keeps it
TEST_LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGMA_DATA_DIR", str(tmp_path / "cache"))


def idx_file(path, code, shape, payload):
    path.write_bytes(bytes([0, 0, code, len(shape)]) + struct.pack(f">{len(shape)}I", *shape) + payload)
    return path


@pytest.mark.skipif(not MNIST_DIR.is_dir(), reason=f"MNIST test set not present at {MNIST_DIR}")
def test_real_test_set_scaled_and_as_uint8():
    scaled = load_mnist(MNIST_DIR, train=False)
    assert scaled.section("inputs").shape == (10_000, 28, 28) and scaled.section("inputs").dtype == np.float32
    assert 0 <= scaled.section("inputs").min() and scaled.section("inputs").max() <= 1
    raw = dataset_from_config({"extractor": "mnist", "directory": str(MNIST_DIR), "train": False, "scale": False})
    assert raw.section("inputs").dtype == np.uint8
    assert np.bincount(raw.section("targets"), minlength=10).tolist() == TEST_LABEL_COUNTS


def test_missing_files_name_directory_and_files(tmp_path):
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte\[\.gz\], t10k-labels-idx1-ubyte\[\.gz\]") as error:
        load_mnist(tmp_path, train=False)
    assert str(tmp_path) in str(error.value)


def test_mismatched_files_are_named(tmp_path):
    idx_file(tmp_path / "t10k-images-idx3-ubyte", 0x08, (2, 28, 28), bytes(2 * 784))
    idx_file(tmp_path / "t10k-labels-idx1-ubyte", 0x08, (3,), bytes(3))
    with pytest.raises(DataError, match=r"do not match: images \(2, 28, 28\) .* labels \(3,\)"):
        load_mnist(tmp_path, train=False)


def test_downloads_from_the_first_working_mirror_with_checksums_into_the_data_dir(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    idx_file(mirror / "t10k-images-idx3-ubyte", 0x08, (2, 28, 28), bytes(2 * 784))
    idx_file(mirror / "t10k-labels-idx1-ubyte", 0x08, (2,), bytes([3, 4]))
    checksums = {}
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        data = gzip.compress((mirror / stem).read_bytes())
        (mirror / f"{stem}.gz").write_bytes(data)
        checksums[f"{stem}.gz"] = hashlib.md5(data).hexdigest()
    monkeypatch.setattr(mnist_module, "MNIST_MD5", checksums)
    monkeypatch.setattr(mnist_module, "MNIST_MIRRORS", ((tmp_path / "down").as_uri() + "/", mirror.as_uri() + "/"))
    dataset = mnist_module.mnist(train=False)
    assert dataset.section("targets").tolist() == [3, 4]
    assert (tmp_path / "cache" / "mnist" / "t10k-labels-idx1-ubyte.gz").is_file()
    with pytest.raises(DataError, match=r"MNIST files not found in .*train-images"):
        mnist_module.mnist(train=True, download=False)


def test_a_download_with_the_wrong_checksum_is_refused(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (mirror / f"{stem}.gz").write_bytes(gzip.compress(b"not what was published"))
    monkeypatch.setattr(mnist_module, "MNIST_MIRRORS", (mirror.as_uri() + "/",))
    with pytest.raises(DataError, match=r"md5"):
        mnist_module.mnist(train=False)
    assert not (tmp_path / "cache" / "mnist" / "t10k-images-idx3-ubyte.gz").exists()


def test_offline_the_error_is_one_short_line_that_ends_with_the_way_out(tmp_path, monkeypatch, capsys):
    import requests
    from pooch import HTTPDownloader

    from sigma_core import cli_main

    def offline(*args, **kwargs):  # what requests raises when DNS fails: 400 characters of wrapped urllib3 errors
        raise requests.ConnectionError("HTTPSConnectionPool(host='x', port=443): Max retries exceeded with url: "
                                       "/mnist (Caused by NameResolutionError(...: Failed to resolve 'x' ...))" * 3)

    monkeypatch.setattr(HTTPDownloader, "__call__", offline)
    run = tmp_path / "mnist.toml"
    run.write_text('[data]\nextractor = "mnist"\n[[network.layers]]\ntype = "input"\nshape = [28, 28]\n'
                   '[[network.layers]]\ntype = "dense"\nsize = 10\n[[network.layers]]\ntype = "softmax_ce"\n')
    assert cli_main(["train", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()[-1] + "\n"  # after the run's INFO lines ("MNIST files are stored")
    assert err.startswith("error: MNIST: ") and "Caused by" not in err, err
    assert "cannot connect to ossci-datasets.s3.amazonaws.com" in err and "cannot connect to yann.lecun.com" in err
    assert err.rstrip().endswith("or in a folder DIR given with --set data.directory=DIR") and len(err) < 600, err


def test_registered_by_this_distribution():
    plugins.reset()
    assert plugins.get("extractor", "mnist").distribution == "sigmann-mnist"


def test_an_unreadable_or_unwritable_folder_is_one_line(tmp_path, monkeypatch):
    def no_permission(self):  # what a folder of another user's gives (the tests run as root)
        raise PermissionError(13, "Permission denied", str(self))

    with monkeypatch.context() as patch:
        patch.setattr(Path, "is_file", no_permission)
        with pytest.raises(DataError, match=rf"^MNIST folder {tmp_path}: cannot look in it \(Permission denied\)$"):
            load_mnist(tmp_path)
        with pytest.raises(DataError, match=r"^MNIST folder .*: cannot look in it \(Permission denied\)$"):
            mnist_module.download_mnist(train=False, directory=tmp_path)
    (tmp_path / "file").write_text("x")  # where the download would go, a file stands: refused before downloading
    monkeypatch.setattr(mnist_module, "resolve", lambda *args, **kwargs: pytest.fail("downloaded"))
    with pytest.raises(SigmaError, match=rf"^MNIST folder {tmp_path / 'file'}: cannot write there \(it is a file, "
                                         r"not a folder\)$"):
        mnist_module.download_mnist(train=False, directory=tmp_path / "file")

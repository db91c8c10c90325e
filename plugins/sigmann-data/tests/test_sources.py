"""Sources: local files, downloads (file:// and a loopback HTTP server), checksums, fallback, unpacking; and the
core handing a run file's URL, archive or checksummed path to them."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import http.server
import io
import os
import tarfile
import threading
import zipfile
from functools import partial

import numpy as np
import pytest

from sigma_core import DataError
from sigma_core.atomic import PARTIAL
from sigma_core.data import dataset_from_config
from sigmann_data.sources import data_dir, download, resolve

PAYLOAD = b"1,2,3\n4,5,6\n"


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGMA_DATA_DIR", str(tmp_path / "cache"))


@pytest.fixture
def http_root(tmp_path):
    """A loopback HTTP server over a folder; yields (folder, base URL, request log)."""
    root = tmp_path / "www"
    root.mkdir()
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_port}/", requests
    server.shutdown()
    server.server_close()


def leftovers(folder):
    return [p for p in folder.rglob("*") if PARTIAL in p.name]


def test_data_dir_follows_the_environment(tmp_path):
    assert data_dir() == tmp_path / "cache"


def test_local_file_and_missing_file(tmp_path):
    (tmp_path / "a.csv").write_bytes(PAYLOAD)
    assert resolve(str(tmp_path / "a.csv")) == tmp_path / "a.csv"
    with pytest.raises(DataError, match=r"file not found: .*nothere.csv"):
        resolve(tmp_path / "nothere.csv")


def test_http_download_is_cached_and_checked(http_root):
    root, base, requests = http_root
    (root / "a.csv").write_bytes(PAYLOAD)
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    path = resolve(base + "a.csv", md5=md5)
    assert path.read_bytes() == PAYLOAD and path.is_relative_to(data_dir())
    assert resolve(base + "a.csv", md5=md5) == path
    assert len(requests) == 1  # the second resolve used the cached file


def test_checksum_mismatch_retries_then_leaves_nothing(tmp_path, http_root):
    root, base, requests = http_root
    (root / "a.csv").write_bytes(PAYLOAD)
    with pytest.raises(DataError, match=r"cannot download .*SHA256 hash of downloaded file .* does not match the "
                                        r"known hash: expected sha256:00+ but got"):
        download(base + "a.csv", tmp_path / "out" / "a.csv", checksums={"sha256": "0" * 64}, retries=1, progress=False)
    assert len(requests) == 2  # tried again once
    assert not (tmp_path / "out" / "a.csv").exists() and not leftovers(tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []  # nor pooch's temporary file


def test_a_missing_file_url_is_one_line_naming_it(tmp_path):
    with pytest.raises(DataError, match=r"cannot download file://.*gone.csv to .*No such file"):
        download((tmp_path / "gone.csv").as_uri(), tmp_path / "out" / "gone.csv", progress=False)


def test_a_cached_file_that_no_longer_matches_is_downloaded_again(tmp_path):
    (tmp_path / "a.csv").write_bytes(PAYLOAD)
    target = tmp_path / "out" / "a.csv"
    target.parent.mkdir()
    target.write_bytes(b"corrupt")
    download((tmp_path / "a.csv").as_uri(), target, checksums={"md5": hashlib.md5(PAYLOAD).hexdigest()},
             progress=False)
    assert target.read_bytes() == PAYLOAD


def test_fallback_uses_the_first_source_that_works_and_reports_all_failures(tmp_path, http_root):
    root, base, _ = http_root
    (root / "b.csv").write_bytes(PAYLOAD)
    path = resolve([str(tmp_path / "missing.csv"), base + "b.csv"])
    assert path.read_bytes() == PAYLOAD
    with pytest.raises(DataError, match=r"no source could be used: \[1\] file not found.*\[2\] cannot download"):
        resolve([str(tmp_path / "missing.csv"), (tmp_path / "gone.csv").as_uri()])


def test_compressed_files_and_archives_unpack_once(tmp_path):
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(PAYLOAD))
    (tmp_path / "a.csv.bz2").write_bytes(bz2.compress(PAYLOAD))
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as archive:
        archive.writestr("cls/a.csv", PAYLOAD)
    with tarfile.open(tmp_path / "t.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("inner/a.csv")
        info.size = len(PAYLOAD)
        archive.addfile(info, io.BytesIO(PAYLOAD))

    unpacked = resolve(tmp_path / "a.csv.gz")
    assert unpacked.name == "a.csv" and unpacked.read_bytes() == PAYLOAD
    stamp = unpacked.stat().st_mtime_ns
    assert resolve(tmp_path / "a.csv.gz").stat().st_mtime_ns == stamp  # not unpacked again
    assert resolve(tmp_path / "a.csv.bz2").read_bytes() == PAYLOAD
    assert (resolve(tmp_path / "z.zip") / "cls" / "a.csv").read_bytes() == PAYLOAD
    assert (resolve(tmp_path / "t.tar.gz") / "inner" / "a.csv").read_bytes() == PAYLOAD


def test_a_corrupt_archive_names_the_file_and_leaves_nothing(tmp_path):
    (tmp_path / "bad.csv.gz").write_bytes(gzip.compress(PAYLOAD)[:-12])
    with pytest.raises(DataError, match=r"cannot unpack .*bad.csv.gz"):
        resolve(tmp_path / "bad.csv.gz")
    assert not leftovers(data_dir()) and not list(data_dir().rglob("bad.csv"))


# -- caches keyed on content (issue 10, item 7) ------------------------------------------------------------------


def _archive(path, payload: bytes) -> None:
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("inner/a.csv", payload)
    else:
        path.write_bytes(gzip.compress(payload))


@pytest.mark.parametrize("name, member", [("a.csv.gz", ""), ("a.zip", "inner/a.csv")])
def test_an_archive_replaced_by_new_content_with_an_older_mtime_is_unpacked_again(tmp_path, name, member):
    source = tmp_path / name
    _archive(source, PAYLOAD)
    assert (resolve(source) / member).read_bytes() == PAYLOAD
    old = source.stat().st_mtime - 3600
    _archive(source, b"7,8,9\n")  # as cp -p, rsync -t or untar leave it: new bytes, an old mtime
    os.utime(source, (old, old))
    assert (resolve(source) / member).read_bytes() == b"7,8,9\n"
    unpacked = resolve(source)
    stamp = unpacked.stat().st_mtime_ns
    os.utime(source)  # touched, same content: no new unpacking
    assert resolve(source).stat().st_mtime_ns == stamp and (unpacked / member).read_bytes() == b"7,8,9\n"


def test_a_download_that_fails_to_unpack_is_dropped_so_a_fixed_source_is_fetched(http_root):
    root, base, requests = http_root
    (root / "a.csv.gz").write_bytes(gzip.compress(PAYLOAD)[:-12])  # the server holds a truncated file
    with pytest.raises(DataError, match=r"cannot unpack .*a.csv.gz"):
        resolve(base + "a.csv.gz")
    assert not list((data_dir() / "downloads").rglob("a.csv*"))
    (root / "a.csv.gz").write_bytes(gzip.compress(PAYLOAD))  # fixed upstream
    assert resolve(base + "a.csv.gz").read_bytes() == PAYLOAD
    assert len(requests) == 2


def test_a_cached_download_changed_on_disk_is_fetched_again(http_root):
    root, base, requests = http_root
    (root / "a.csv").write_bytes(PAYLOAD)
    cached = resolve(base + "a.csv")
    cached.write_bytes(PAYLOAD[:5])  # truncated in the cache (no checksum was given to catch it)
    assert resolve(base + "a.csv").read_bytes() == PAYLOAD
    assert len(requests) == 2
    assert resolve(base + "a.csv") == cached and len(requests) == 2  # intact now: reused


def test_a_download_cut_short_is_retried_and_never_cached(tmp_path):
    served = []

    class ShortBody(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            served.append(1)
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD[:5])  # and the connection closes

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ShortBody)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(DataError, match=r"cannot download .*a.csv: .*IncompleteRead"):
            download(f"http://127.0.0.1:{server.server_port}/a.csv", tmp_path / "out" / "a.csv", retries=1,
                     progress=False)
        assert served == [1, 1]  # tried twice
    finally:
        server.shutdown()
        server.server_close()
    assert list((tmp_path / "out").iterdir()) == []


def test_both_checksums_are_checked(http_root):
    root, base, _ = http_root
    (root / "a.csv").write_bytes(PAYLOAD)
    sha256 = hashlib.sha256(PAYLOAD).hexdigest()
    assert resolve(base + "a.csv", md5=hashlib.md5(PAYLOAD).hexdigest(), sha256=sha256).read_bytes() == PAYLOAD
    with pytest.raises(DataError, match=r"md5 checksum mismatch, expected f+, got"):
        resolve(base + "a.csv", md5="f" * 32, sha256=sha256)


# -- through the core's seam: a run file's path ----------------------------------------------------------------


def test_a_run_file_url_archive_or_checksum_reaches_this_source(tmp_path, http_root):
    root, base, requests = http_root
    (root / "d.csv.gz").write_bytes(gzip.compress(PAYLOAD))
    (tmp_path / "d.csv").write_bytes(PAYLOAD)
    (tmp_path / "d.csv.bz2").write_bytes(bz2.compress(PAYLOAD))
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    for path in (base + "d.csv.gz", str(tmp_path / "d.csv.bz2"), [str(tmp_path / "gone.csv"), str(tmp_path / "d.csv")]):
        dataset = dataset_from_config({"extractor": "csv", "path": path})
        np.testing.assert_array_equal(dataset.section("inputs"), [[1, 2], [4, 5]])
    assert len(dataset_from_config({"extractor": "csv", "path": str(tmp_path / "d.csv"), "md5": md5})) == 2
    with pytest.raises(DataError, match=r"d.csv: md5 checksum mismatch"):
        dataset_from_config({"extractor": "csv", "path": str(tmp_path / "d.csv"), "md5": "0" * 32})
    assert len(requests) == 1

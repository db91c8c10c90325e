"""Images a run publishes (a run value naming a PNG in the run's folder): listed in the state, served by
``GET /api/image``, refused outside the run's folder."""

from __future__ import annotations

import struct

import httpx
import pytest

from sigmann_web.board import Board
from sigmann_web.server import Server


@pytest.fixture
def serve():
    """``serve(board)``: a started server showing ``board``, and a client for it (no token: reading needs none)."""
    servers = []

    def start(board):
        servers.append(Server())
        servers[-1].add(board)
        servers[-1].start()
        return httpx.Client(base_url=servers[-1].url(with_token=False).rstrip("/"), timeout=20)

    yield start
    for server in servers:
        server.stop()


def test_a_published_png_in_the_run_folder_is_served_and_others_are_refused(tmp_path, serve, picture):
    folder, image = tmp_path / "run", picture(30, 10)
    (folder / "dreams").mkdir(parents=True)
    (folder / "dreams" / "latest.png").write_bytes(image)
    (tmp_path / "secret.png").write_bytes(image)
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    board = Board("dreamy", {}, folder=folder)
    board.values = {"epoch": 3, "dream": str(folder / "dreams" / "latest.png"), "outside": str(tmp_path / "secret.png"),
                    "climb": str(folder / ".." / "secret.png"), "link": str(folder / "link.png"),
                    "missing": str(folder / "dreams" / "epoch_0009.png"), "log": str(folder / "log.txt")}
    client = serve(board)

    served = client.get("/api/image", params={"run": "dreamy", "value": "dream", "v": "1"})
    assert served.status_code == 200 and served.headers["content-type"] == "image/png" and served.content == image
    assert served.headers["cross-origin-resource-policy"] == "same-origin"  # no other site's page shows it
    images = client.get("/api/state", params={"run": "dreamy"}).json()["images"]
    assert list(images) == ["dream"] and images["dream"]["path"] == str(folder / "dreams" / "latest.png")
    for value in ("outside", "climb", "link"):
        refused = client.get("/api/image", params={"run": "dreamy", "value": value})
        assert refused.status_code == 400 and "is not inside the run's folder" in refused.json()["error"], value
    assert client.get("/api/image", params={"run": "dreamy", "value": "missing"}).status_code == 404
    for value in ("log", "epoch", "nothing"):  # not a PNG, not a path, not a value: no image by that name
        refused = client.get("/api/image", params={"run": "dreamy", "value": value})
        assert refused.status_code == 404 and refused.json()["error"] == (
            f"run 'dreamy' publishes no image {value!r} (images: dream, outside, climb, link, missing)")
    assert client.get("/api/image", params={"run": "nobody", "value": "dream"}).status_code == 404
    assert client.post("/api/image", params={"run": "dreamy", "value": "dream"}).status_code == 405  # read-only


def test_a_run_without_a_folder_serves_no_image(tmp_path, serve, picture):
    (tmp_path / "a.png").write_bytes(picture(4, 4))
    board = Board("loose", {})
    board.values = {"picture": str(tmp_path / "a.png")}
    client = serve(board)
    assert client.get("/api/state").json()["images"] == {}
    assert client.get("/api/image", params={"value": "picture"}).status_code == 400


def test_a_live_run_serves_what_a_hook_publishes_in_its_folder(live, tmp_path, publisher):
    run = live(hooks=[publisher(width=40)], directory=tmp_path / "run")
    run.wait_for(lambda: "picture" in run.state()["images"], what="a published picture")
    served = run.client.get("/api/image", params={"run": "blobs", "value": "picture"})
    assert served.status_code == 200 and served.content.startswith(b"\x89PNG")
    width = struct.unpack(">I", served.content[16:20])[0]  # IHDR: width, height
    assert width > 40 and run.state()["images"]["picture"]["path"].startswith(str(tmp_path / "run" / "pictures"))

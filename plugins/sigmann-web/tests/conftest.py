"""A live run with the web hook, trained in this process on a thread, and a client for its API; a long run's
metrics file."""

from __future__ import annotations

import json
import socket
import struct
import time
import tomllib
import zlib

import httpx
import pytest

from sigma_core import Hook
from sigma_core import config as run_config
from sigma_core.training.loop import Loop
from sigma_core.run import build_run
from sigmann_web.hook import WebHook

#: The step whose cost spikes in a :func:`long_run`.
SPIKE = 4_321_230


@pytest.fixture
def long_run():
    """A function writing into a directory a long run's ``metrics.jsonl`` (:func:`write_long_run`)."""
    return write_long_run


def write_long_run(directory, size: int) -> dict:
    """Write into ``directory`` a run's ``metrics.jsonl`` of ``size`` bytes, as the ``metrics`` hook writes it
    (:func:`sigmann_monitors.record`'s keys, one JSON object a line): an iteration record every 10 steps, an epoch
    record every 1,000, a cost of 100 at step :data:`SPIKE`, and a stop record; returns its ``last`` step and
    the ``spike``'s."""
    directory.mkdir()
    step, written, lines = 0, 0, []
    with (directory / "metrics.jsonl").open("w") as stream:
        while written < size:
            step += 10
            epoch, iteration = step // 1000 + 1, step % 1000
            cost = 100.0 if step == SPIKE else 2.0 / (1 + step / 1e5) + (step % 70) / 1000
            lines.append(f'{{"time": {step / 100:.3f}, "event": "iteration", "step": {step}, "epoch": {epoch}, '
                         f'"iteration": {iteration}, "cost": {cost!r}, "learning_rate": 0.01}}\n')
            if iteration == 0:
                lines.append(f'{{"time": {step / 100:.3f}, "event": "epoch", "step": {step}, "epoch": {epoch - 1}, '
                             f'"iteration": 1000, "cost": {cost!r}, "validation.cost": {cost * 1.1!r}, '
                             f'"validation.accuracy": {1 - cost / 3!r}, "learning_rate": 0.01}}\n')
            if len(lines) >= 10_000:
                written += stream.write("".join(lines))
                lines = []
        stream.write("".join(lines))
        stream.write(json.dumps({"time": step / 100, "event": "stop", "epoch": step // 1000, "iteration": 0,
                                 "step": step, "epochs": step // 1000, "stopped": None}) + "\n")
    return {"last": step, "spike": SPIKE}


# 8×8 "images" of noise in 10 classes: nothing to learn, but the shape of the digits run, on the numpy handler.
RUN_FILE = """
name = "blobs"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 400
shape = [8, 8]
classes = 10
[split]
validation = 0.2
[[network.layers]]
type = "input"
shape = [8, 8]
[[network.layers]]
type = "dense"
size = 16
activation = "relu"
[[network.layers]]
type = "dropout"
p = 0.1
[[network.layers]]
type = "dense"
size = 10
[[network.layers]]
type = "softmax_ce"
[optimiser]
type = "momentum"
learning_rate = 0.01
[training]
batch_size = 8
epochs = 100000
prefetch = 0
"""


def build(name="blobs", epochs=100_000):
    raw = tomllib.loads(RUN_FILE)
    raw["name"], raw["training"]["epochs"] = name, epochs
    run = build_run(run_config.validate(raw))
    run.trainer.initialise(run.handler)
    return run


class Live:
    """A run training on its own thread with a web hook; ``client`` sends the token unless told not to."""

    def __init__(self, epochs=100_000, hooks=(), directory=None, **options):
        self.run = build(epochs=epochs)
        self.trainer = self.run.trainer
        self.initial = self.trainer.network.state_dict()
        # A port of its own: a server another test's run left up for its last half second is not joined.
        self.hook = WebHook(**{"port": free_port(), **options})
        self.loop = Loop(self.trainer, epochs=epochs, hooks=[self.hook, *hooks], directory=directory)
        self.loop.start()
        deadline = time.monotonic() + 30
        while self.hook.server is None or self.hook.board.name not in self.hook.server.boards:
            assert time.monotonic() < deadline, "the web hook did not start"
            time.sleep(0.02)
        self.server = self.hook.server
        self.base = self.server.url(with_token=False).rstrip("/")
        self.client = httpx.Client(base_url=self.base, headers={"X-Sigma-Token": self.server.token}, timeout=20)

    def post(self, path, token=True, **body):
        headers = None if token else {"X-Sigma-Token": ""}
        return self.client.post(path, json=body, headers=headers)

    def state(self):
        return self.client.get("/api/state").json()

    def wait_for(self, predicate, timeout=20, what="a condition"):
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def close(self):
        self.loop.signal_stop()
        self.loop.join(30)
        self.client.close()
        self.server.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def png(width: int, height: int) -> bytes:
    """A grey ``width``×``height`` PNG, made here so that the tests need no imaging library."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes((x * 255 // max(width - 1, 1)) for x in range(width)) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


class Publisher(Hook):
    """Does what the ``dream`` hook of sigmann-debug does, without it: every epoch a PNG in the run's folder
    (``pictures/epoch_NNNN.png``, ``width`` plus the epoch modulo 50 pixels wide: each epoch's differs from the
    last's), its path published as the value ``picture``."""

    name = "publisher"

    def __init__(self, width: int = 40):
        self.width = width

    def on_epoch(self, report):
        folder = self.run.directory / "pictures"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"epoch_{self.run.trainer.epoch:04d}.png"
        path.write_bytes(png(self.width + self.run.trainer.epoch % 50, 20))
        self.run.publish("picture", str(path))


@pytest.fixture
def picture():
    """``picture(width, height)``: a PNG's bytes (:func:`png`)."""
    return png


@pytest.fixture
def publisher():
    """``publisher(width)``: a hook publishing a PNG in the run's folder every epoch (:class:`Publisher`)."""
    return Publisher


@pytest.fixture
def run_file(tmp_path):
    """``run_file(epochs)``: the run file above, written to ``tmp_path``, training ``epochs`` epochs."""

    def write(epochs=2):
        path = tmp_path / "run.toml"
        path.write_text(RUN_FILE.replace("epochs = 100000", f"epochs = {epochs}"))
        return path

    return write


@pytest.fixture
def built():
    """``built(name, epochs)``: the run file's run, built and initialised."""
    return build


@pytest.fixture
def live():
    runs = []

    def start(**options):
        runs.append(Live(**options))
        return runs[-1]

    yield start
    for run in runs:
        run.close()

"""Every shell and Python example in README.md and the user's pages of docs/ runs as written, in reading order, in
one scratch directory (a page may use what an earlier one wrote: the checkpoints pages train, later ones predict).

Python blocks run in one namespace, as in a notebook (a later block may use an earlier one's ``inputs``).
Shell lines run ``sigma`` in-process (``sigma_core.cli.main``, what the console script calls) and must exit 0;
``echo TEXT | sigma ...`` feeds TEXT on stdin, and ``A && B`` runs both. An untagged block of ``$ sigma ...``
lines runs each command and must print the lines under it. Not run here, on purpose:
- creating a venv or installing packages (``python3 -m venv``, ``pip install``): CI (``.ci/run``) does exactly that;
- ``python -m pytest``: the test suite itself, or a scaffolded plugin's tests (sigmann-testing's ``tests/test_scaffold.py`` runs them);
- ``tensorboard`` and ``curl`` (a third-party server; requests to a live dashboard, which sigmann-web's tests make).
``sigma dashboard`` serves until Ctrl-C, so it runs in a subprocess that gets Ctrl-C once it serves. Tests do not
download: the MNIST example reads a stand-in of the official files from ``SIGMA_DATA_DIR``, where the
``mnist`` extractor would have stored its download; and the text the README asks the reader to bring
(``my-text.txt``) is a short one written here.
"""

from __future__ import annotations

import gzip
import io
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sigma_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
#: The README, then the pages its content moved to, in the order the README had them.
DOCUMENTS = [ROOT / name for name in (
    "README.md", "docs/getting-started.md", "docs/run-files.md", "docs/hooks.md", "docs/operators.md",
    "docs/dashboard.md", "docs/checkpoints.md", "docs/tune.md", "docs/using-networks.md", "docs/examples.md",
    "docs/python.md", "docs/backends.md", "docs/extending.md", "docs/performance.md")]
NOT_RUN = {  # a command's program -> why it is not run here
    "pip": "installs packages", "python3 -m venv": "creates a venv", "python -m pytest": "the tests themselves",
    "tensorboard": "a third-party server", "curl": "requests to a live dashboard",
    "mkdocs": "serves the documentation site (.ci/run builds it)",
}


TEXT = "The quick brown fox jumps over the lazy dog; the dog sleeps on. " * 4


def blocks():
    """(document, language, text) of every fenced block, in reading order."""
    return [(path, *block) for path in DOCUMENTS
            for block in re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), flags=re.S | re.M)]


def commands(line: str):
    """The ``&&``-joined commands of a shell line, each as (argv, stdin text or None)."""
    for part in re.split(r"\s&&\s", line):
        stdin = None
        if "|" in shlex.split(part, comments=True):
            source, part = part.split(" | ", 1)
            stdin = " ".join(shlex.split(source)[1:]) + "\n"  # echo TEXT
        argv = shlex.split(part, comments=True)
        if argv:
            yield argv, stdin


def not_run(argv) -> str | None:
    """Why the command is not run here, or None."""
    program = Path(argv[0]).name
    if program in ("python", "python3"):
        program = " ".join([program, *argv[1:3]])
    return NOT_RUN.get(program)


def mnist_stand_in(directory: Path):
    """10,000 28×28 images and labels in the official files' format and names (gzipped IDX)."""
    directory.mkdir(parents=True)
    labels = np.arange(10_000, dtype=np.uint8) % 10
    images = np.zeros((10_000, 28, 28), np.uint8)
    images[np.arange(10_000), 2 + 2 * labels] = 255  # a bright row per class
    for name, array, code in (("images-idx3", images, 3), ("labels-idx1", labels, 1)):
        header = b"\0\0\x08" + bytes([code]) + struct.pack(f">{code}I", *array.shape)
        (directory / f"t10k-{name}-ubyte.gz").write_bytes(gzip.compress(header + array.tobytes(), compresslevel=1))


def sigma(argv, stdin, capsys, monkeypatch):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def dashboard(argv, cwd):
    """``sigma dashboard ...`` until it serves, then Ctrl-C: it must stop cleanly."""
    process = subprocess.Popen([sys.executable, "-m", "sigma_core", *argv], cwd=cwd, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        assert "dashboard of" in line and "http://127.0.0.1:" in line, line + process.stderr.read()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) in (0, 130), process.stderr.read()
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_every_readme_example_runs_as_written(tmp_path, capsys, monkeypatch):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    mnist_stand_in(tmp_path / "data" / "mnist")
    (tmp_path / "my-text.txt").write_text(TEXT)
    monkeypatch.setenv("SIGMA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    namespace, ran, skipped = {}, [], []
    for document, language, text in blocks():
        if language == "python":
            exec(compile(text, str(document), "exec"), namespace)
            ran.append(text.splitlines()[0])
        elif language == "sh":
            for line in text.splitlines():
                for argv, stdin in commands(line):
                    if not_run(argv):
                        skipped.append(not_run(argv))
                    elif Path(argv[0]).name == "sigma" and argv[1] == "dashboard":
                        dashboard(argv[1:], tmp_path)
                        ran.append(line)
                    else:
                        assert Path(argv[0]).name == "sigma", f"{document.name} runs {argv[0]!r}: run it here, or say why not"
                        status, out, err = sigma(argv[1:], stdin, capsys, monkeypatch)
                        assert status == 0, f"{line}\n{err}"
                        ran.append(line)
                        if argv[1:] == ["train", "examples/digits.toml"]:  # the main job: ≈ 97 % held-out
                            assert re.search(r"held-out accuracy 9\d\.\d\d%", out), out
        elif language == "" and text.startswith("$ sigma "):
            command, *expected = text.splitlines()
            status, out, err = sigma(shlex.split(command[2:])[1:], None, capsys, monkeypatch)
            assert status == 2 and [line for line in err.splitlines() if not line.startswith("sigma: ")] == expected
            ran.append(command)
    assert len(ran) >= 30 and set(skipped) == set(NOT_RUN.values())  # no stale reason
    assert (tmp_path / "checkpoints" / "digits-e3-i0.onnx").is_file() and (tmp_path / "sigmann-demo").is_dir()

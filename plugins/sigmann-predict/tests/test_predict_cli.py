"""Issue 15 item 1: Network.predict, sigma_core.load, ``sigma predict`` and ``sigma export``."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

import sigma_core
from sigma_core import config, plugins
from sigma_core.cli import main
from sigmann_predict.probabilities import class_probabilities
from sigma_core.run import build_run

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits.toml"


def held_out(overrides=(), preprocess=True):
    """The digits run's held-out records: as it trained on them, or (``preprocess=False``) raw, as the data source
    gives them (the split is the same: preprocessing never reorders records)."""
    cfg = config.load(DIGITS, [*overrides, "handler.name=numpy"])
    if not preprocess:
        cfg["data"]["preprocess"] = []
    return build_run(cfg).trainer.validation["validation"].dataset


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A digits checkpoint after 3 epochs, and the held-out inputs (raw) and labels it was evaluated on."""
    directory = tmp_path_factory.mktemp("digits")
    overrides = ["training.epochs=3", "checkpoint.every_epochs=1", f'checkpoint.directory="{directory}"']
    assert main(["train", str(DIGITS), "--handler", "numpy", "--quiet", *(a for o in overrides for a in ("--set", o))]) == 0
    raw = held_out(preprocess=False)
    np.save(directory / "x.npy", raw.section("inputs"))
    return directory / "digits-e3-i0.ckpt", raw.section("inputs"), raw.section("targets")


def test_a_fitted_run_predicts_from_raw_inputs(tmp_path, capsys, monkeypatch):
    """Issue 26: a run's fitted statistics (per-feature range, mean and deviation) travel in its checkpoint and
    export, so raw rows predict exactly as the preprocessed records did in process."""
    overrides = ["training.epochs=2", "checkpoint.every_epochs=1", f'checkpoint.directory="{tmp_path}"',
                 "data.preprocess=[{normalise={per_feature=true}}, {standardise=true}]"]
    assert main(["train", str(DIGITS), "--handler", "numpy", "--quiet", *(a for o in overrides for a in ("--set", o))]) == 0
    checkpoint, _ = tmp_path / "digits-e2-i0.ckpt", capsys.readouterr()
    preprocessed, raw = held_out(overrides).section("inputs"), held_out(overrides, preprocess=False)
    assert np.abs(raw.section("inputs") - preprocessed).max() > 1  # the two really differ
    network = sigma_core.load(checkpoint, "numpy")
    expected = network.predict(raw.section("inputs"))
    network.preprocessing = None  # the bare network on what the run trained on: the same numbers, bit for bit
    np.testing.assert_array_equal(network.predict(preprocessed), expected)
    status, out, _ = sigma(capsys, "eval", checkpoint, "--json", "--handler", "numpy")
    assert status == 0 and json.loads(out)["accuracy"] == np.mean(expected.argmax(1) == raw.section("targets"))

    np.savetxt(tmp_path / "raw.csv", raw.section("inputs"), delimiter=",", fmt="%g")  # 0..16, as sklearn has them
    assert sigma(capsys, "predict", checkpoint, tmp_path / "raw.csv", "--out", tmp_path / "p.npy")[0] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), class_probabilities(network, expected))
    status, out, _ = sigma(capsys, "predict", checkpoint, "-", "--format", "json",
                           stdin=json.dumps(raw.section("inputs")[:3].astype(int).tolist()), monkeypatch=monkeypatch)
    assert status == 0 and [json.loads(line)["class"] for line in out.splitlines()] == expected[:3].argmax(1).tolist()
    assert sigma(capsys, "export", checkpoint, "--format", "safetensors")[0] == 0
    np.testing.assert_array_equal(sigma_core.load(checkpoint.with_suffix(".safetensors"), "numpy").predict(
        raw.section("inputs")), expected)
    # sigma eval on other raw data (the held-out rows as a CSV file) keeps the training statistics too, where
    # fitting them anew to these 360 rows would change every input
    np.savetxt(tmp_path / "labelled.csv", np.column_stack([raw.section("inputs"), raw.section("targets")]),
               delimiter=",", fmt="%g")
    (tmp_path / "other.toml").write_text(DIGITS.read_text().replace('extractor = "sklearn"\nname = "digits"', (
        f'extractor = "csv"\npath = "{(tmp_path / "labelled.csv").as_posix()}"\none_hot = 10')).replace(
        "validation = 0.2", "validation = [0, 360]\ntrain = [0, 360]"))
    status, out, err = sigma(capsys, "eval", checkpoint, "--json", "--handler", "numpy", "--data-config",
                             tmp_path / "other.toml")
    assert status == 0, err
    assert json.loads(out)["accuracy"] == np.mean(expected.argmax(1) == raw.section("targets"))


def sigma(capsys, *argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_predict_reproduces_the_accuracy_eval_reports(trained, capsys, tmp_path):
    checkpoint, inputs, labels = trained
    status, out, _ = sigma(capsys, "eval", checkpoint, "--json", "--handler", "numpy")
    assert status == 0
    reported = json.loads(out)["accuracy"]
    status, out, _ = sigma(capsys, "predict", checkpoint, checkpoint.parent / "x.npy", "--handler", "numpy")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert status == 0 and len(rows) == len(labels) and list(rows[0])[-3:] == ["top1", "top2", "top3"]
    assert np.mean([int(row["class"]) == label for row, label in zip(rows, labels)]) == reported
    assert all(abs(sum(float(row[f"p{i}"]) for i in range(10)) - 1) < 1e-4 for row in rows)
    assert sigma(capsys, "predict", checkpoint, checkpoint.parent / "x.npy", "--out", tmp_path / "p.npy")[0] == 0
    probabilities = np.load(tmp_path / "p.npy")
    assert probabilities.shape == (len(labels), 10) and np.mean(probabilities.argmax(1) == labels) == reported


def test_predict_reads_csv_npz_and_json_rows(trained, capsys, tmp_path, monkeypatch):
    checkpoint, inputs, _ = trained
    expected = sigma_core.load(checkpoint, "numpy").predict(inputs[:5]).argmax(1).tolist()
    np.savetxt(tmp_path / "x.csv", inputs[:5], delimiter=",")
    np.savez(tmp_path / "x.npz", inputs=inputs[:5], targets=np.zeros(5))
    for source in ("x.csv", "x.npz"):
        status, out, err = sigma(capsys, "predict", checkpoint, tmp_path / source, "--format", "json", "--top", "2")
        assert status == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert [row["class"] for row in rows] == expected, source
        assert [entry["class"] for entry in rows[0]["top"]][0] == expected[0] and len(rows[0]["top"]) == 2
    status, out, _ = sigma(capsys, "predict", checkpoint, "-", stdin=json.dumps(inputs[:5].tolist()),
                           monkeypatch=monkeypatch)
    assert status == 0 and [int(line.split(",")[0]) for line in out.splitlines()[1:]] == expected
    status, out, _ = sigma(capsys, "predict", checkpoint, "-", stdin="\n".join(json.dumps(r) for r in inputs[:2].tolist()),
                           monkeypatch=monkeypatch)
    assert status == 0 and len(out.splitlines()) == 3


def test_predict_refuses_bad_input_in_one_line(trained, capsys, tmp_path, monkeypatch):
    checkpoint, _, _ = trained
    status, _, err = sigma(capsys, "predict", checkpoint, "-", stdin="[[1, 2, 3]]", monkeypatch=monkeypatch)
    assert status == 2 and err.splitlines()[-1] == "error: layer '1-input': input 'inputs' has shape (1, 3), expected (batch, 64)"
    (tmp_path / "x.txt").write_text("1,2")
    status, _, err = sigma(capsys, "predict", checkpoint, tmp_path / "x.txt")
    assert status == 2 and "unknown input format" in err
    status, _, err = sigma(capsys, "predict", checkpoint, "-", stdin="[1, 2", monkeypatch=monkeypatch)
    assert status == 2 and "stdin: not JSON rows of numbers" in err


@pytest.mark.parametrize("stdin, message", [
    (b"[" * 100_000 + b"]" * 100_000, "not JSON rows of numbers (nested too deeply)"),  # was a RecursionError
    (b'{"a": 1}', 'not JSON rows of numbers ({"a": 1} is not a number)'),  # was a TypeError
    (b'[[0, "1"]]', 'not JSON rows of numbers ("1" is not a number)'),  # was converted without a word
    (b"[[1, true]]", "not JSON rows of numbers (true is not a number)"),
    (b"[[1e999, 0]]", "not JSON rows of finite numbers (NaN or infinity; 1e999 reads as infinity)"),
    (b"[[NaN, 0]]", "not JSON rows of finite numbers (NaN or infinity; 1e999 reads as infinity)"),
    (b"[[" + b"9" * 400 + b", 0]]", "not JSON rows of numbers (int too large to convert to float)"),
    (b"\0" * 1_000_000, "not JSON rows of numbers (a NUL byte at offset 0)"),  # /dev/zero: refused, not read forever
])
def test_json_on_stdin_that_is_not_rows_of_finite_numbers_is_one_line(trained, capsys, monkeypatch, stdin, message):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    status, _, err = sigma(capsys, "predict", trained[0], "-")
    assert status == 2 and err.splitlines()[-1] == f"error: stdin: {message}"


@pytest.mark.parametrize("role, name, what", [("checkpoint", "model.ckpt", "checkpoint"),
                                              ("checkpoint", "model.safetensors", "export"),
                                              ("inputs", "rows.csv", "CSV file"), ("inputs", "rows.npy", "NumPy file")])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_given_as_a_file_is_one_line_not_a_hang(trained, capsys, tmp_path, role, name, what, kind):
    """Every reader of a user's file checks it is a regular file first: opening a FIFO waits for a writer, and
    /dev/zero never ends."""
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    checkpoint, _, _ = trained
    arguments = (path, trained[0].parent / "x.npy") if role == "checkpoint" else (checkpoint, path)
    status, _, err = sigma(capsys, "predict", *arguments)
    reason = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert status == 2
    assert err.splitlines()[-1] == f"error: {what} {path}: cannot read it (it is {reason}, not a regular file)"


#: Handlers that compute (a wrapping one, such as sigmann-debug's ``debug``, is checked by its own distribution).
COMPUTING = [c.name for c in plugins.components("handler") if c.availability()[0] and not hasattr(c.load(), "around")]


@pytest.mark.parametrize("handler_name", COMPUTING)
def test_load_gives_the_same_predictions_on_every_handler_in_any_batch_size(trained, handler_name):
    checkpoint, inputs, _ = trained
    reference = sigma_core.load(checkpoint, "numpy").predict(inputs)
    network = sigma_core.load(checkpoint, handler_name)
    assert network.handler.name == handler_name and network.handler.dtype == "float32"
    first = network.predict(inputs, batch_size=7)
    np.testing.assert_allclose(first, reference, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(network.predict(inputs, batch_size=7), first)  # inference mode: dropout is off
    assert isinstance(first, np.ndarray) and first.shape == (len(inputs), 10)


def test_export_safetensors_loads_back_with_its_architecture(trained, capsys, tmp_path):
    checkpoint, inputs, _ = trained
    out = tmp_path / "digits.safetensors"
    assert sigma(capsys, "export", checkpoint, "--format", "safetensors", "--out", out)[0] == 0
    from safetensors import safe_open

    with safe_open(str(out), framework="numpy") as stream:
        assert json.loads(stream.metadata()["layers"])[1] == {"type": "dense", "size": 128, "activation": "relu"}
        assert set(stream.keys()) == {"2-dense.weights", "2-dense.biases", "4-dense.weights", "4-dense.biases"}
    exported = sigma_core.load(out, "numpy")
    np.testing.assert_array_equal(exported.predict(inputs), sigma_core.load(checkpoint, "numpy").predict(inputs))
    status, _, err = sigma(capsys, "predict", checkpoint.parent / "x.npy", checkpoint.parent / "x.npy")
    assert status == 2 and err.startswith(f"error: checkpoint {checkpoint.parent / 'x.npy'}: truncated or corrupted")


# -- issue 24: bad input is one line, exit 2, and nothing lost --------------------------------------------------------

def test_empty_input_is_reported_as_empty(trained, capsys, tmp_path, monkeypatch):
    checkpoint, inputs, _ = trained
    for stdin in ("[]", "", "[[]]"):
        status, out, err = sigma(capsys, "predict", checkpoint, "-", stdin=stdin, monkeypatch=monkeypatch)
        assert (status, out, errors(err)) == (2, "", ["error: stdin: empty: no input values in it"]), stdin
    np.save(tmp_path / "none.npy", inputs[:0])
    status, out, err = sigma(capsys, "predict", checkpoint, tmp_path / "none.npy")
    assert (status, out, errors(err)) == (2, "", [f"error: {tmp_path / 'none.npy'}: empty: no input values in it"])


def errors(err: str) -> list[str]:
    """stderr without the info lines (``sigma: handler auto -> cpu``)."""
    return [line for line in err.splitlines() if not line.startswith("sigma: ")]


#: Paths a file cannot be written at, made in ``tmp``, and the reason the one line gives.
UNWRITABLE = {
    "a directory": (lambda tmp: (tmp / "folder").mkdir() or tmp / "folder", "it is a directory: name a file"),
    "under a file": (lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "out.x", "{tmp}/file is a file, not a folder"),
    "a name too long": (lambda tmp: tmp / ("n" * 300 + ".x"), "its name is too long for the file system"),
    # replaced whole, a FIFO (or /dev/null, for root) would become a regular file
    "a FIFO": (lambda tmp: os.mkfifo(tmp / "pipe") or tmp / "pipe",
               "it is a FIFO (named pipe), not a regular file, and writing replaces it"),
}


@pytest.mark.parametrize("case", UNWRITABLE)
@pytest.mark.parametrize("command", [["predict", "{checkpoint}", "{inputs}"], ["export", "{checkpoint}"],
                                     ["export", "{checkpoint}", "--format", "onnx"]])
def test_an_unwritable_out_is_one_line_before_any_work(trained, capsys, tmp_path, monkeypatch, command, case):
    checkpoint = trained[0]
    make, reason = UNWRITABLE[case]
    out = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))

    def no_work(*args, **kwargs):
        raise AssertionError("the checkpoint was read before --out was checked")

    monkeypatch.setattr("sigma_core.training.checkpoint.load_checkpoint", no_work)
    argv = [a.format(checkpoint=checkpoint, inputs=checkpoint.parent / "x.npy") for a in command]
    status, stdout, err = sigma(capsys, *argv, "--out", out)
    assert (status, stdout) == (2, "")
    assert errors(err) == [f"error: --out {out}: cannot write it ({reason.format(tmp=tmp_path)})"]
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, nothing left behind


@pytest.mark.parametrize("command", [["predict", "{checkpoint}", "{inputs}"], ["export", "{checkpoint}"]])
def test_out_makes_missing_folders_and_a_refused_write_is_one_line(trained, capsys, tmp_path, monkeypatch, command):
    checkpoint = trained[0]
    argv = [a.format(checkpoint=checkpoint, inputs=checkpoint.parent / "x.npy") for a in command]
    out = tmp_path / "new" / "deeper" / "out.x"
    assert sigma(capsys, *argv, "--out", out)[0] == 0 and out.stat().st_size > 0
    refused = tmp_path / "refused.x"

    def permission_denied(source, target):  # as a read-only or foreign folder does (the tests run as root)
        raise PermissionError(13, "Permission denied", str(source))

    monkeypatch.setattr("os.replace", permission_denied)
    status, stdout, err = sigma(capsys, *argv, "--out", refused)  # the exporter names the path it was given
    option = "--out " if command[0] == "predict" else ""
    assert (status, stdout, errors(err)) == (2, "", [f"error: {option}{refused}: cannot write it (Permission denied)"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]  # the partial file is gone too


@pytest.mark.parametrize("metadata, message", [
    ({"layers": "5"}, "cannot read it as a safetensors export (layers: expected an array, got 5)"),
    ({"layers": "[" * 100_000}, "cannot read it as a safetensors export (maximum recursion depth exceeded"),
    ({"dtype": "int7"}, "cannot read it as a safetensors export (dtype: expected one of float32, float64, got 'int7')"),
    ({"layers": json.dumps([{"type": "input", "shape": [2]}, {"type": "dense", "size": "x"}])},
     "network.layers[1] ('2-dense').size: expected an integer >= 1, got 'x'"),
])
def test_a_bad_safetensors_export_is_one_line_naming_it(capsys, tmp_path, metadata, message):
    from safetensors.numpy import save_file

    path = tmp_path / "bad.safetensors"
    save_file({"2-dense.weights": np.zeros((2, 3), np.float32)}, str(path), {
        "format": "sigma-network", "name": "bad", "dtype": "float32",
        "layers": json.dumps([{"type": "input", "shape": [2]}, {"type": "dense", "size": 3}]), **metadata})
    np.save(tmp_path / "x.npy", np.zeros((1, 2)))
    status, out, err = sigma(capsys, "predict", path, tmp_path / "x.npy", "--handler", "numpy")
    assert status == 2 and out == "" and errors(err)[0].startswith(f"error: {path}: {message}") and len(errors(err)) == 1


def test_raw_inputs_far_outside_the_fitted_range_get_one_warning_line(trained, capsys, tmp_path):
    """0..255 pixels into a network fitted on 0..16 (issue 37): answered, with one line saying so."""
    checkpoint, inputs, _ = trained
    status, _, err = sigma(capsys, "predict", checkpoint, checkpoint.parent / "x.npy", "--handler", "numpy")
    assert status == 0 and "far outside" not in err  # the run's own raw inputs: no word
    np.save(tmp_path / "pixels.npy", inputs * 255 / 16)
    status, out, err = sigma(capsys, "predict", checkpoint, tmp_path / "pixels.npy", "--handler", "numpy")
    assert status == 0 and out.count("\n") == len(inputs) + 1
    assert [line for line in err.splitlines() if "far outside" in line] == [
        "sigma: the inputs range over 0..255, far outside 0..16, the range the network's preprocessing was fitted "
        "on: its predictions mean little (scaled differently from training?)"]


def test_an_export_too_big_for_memory_names_the_file_and_the_layer(capsys, tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "huge.safetensors"
    save_file({"2-dense.weights": np.zeros((2, 3), np.float32)}, str(path), {
        "format": "sigma-network", "name": "huge", "dtype": "float32",
        "layers": json.dumps([{"type": "input", "shape": [200_000]}, {"type": "dense", "size": 2_000_000}])})
    np.save(tmp_path / "x.npy", np.zeros((1, 2)))
    status, out, err = sigma(capsys, "predict", path, tmp_path / "x.npy", "--handler", "numpy")
    assert status == 2 and out == ""
    assert errors(err) == [f"error: {path}: layer '2-dense': the float32 parameters up to this layer need "
                           f"1,600,008,000,000 bytes, more than the {errors(err)[0].rsplit('the ', 1)[1]}"]

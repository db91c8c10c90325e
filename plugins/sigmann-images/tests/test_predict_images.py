"""``sigma predict`` on image files: read with Pillow, fitted to the input's shape, raw pixels (the checkpoint's fitted
preprocessing applies, as to arrays)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from PIL import Image

import sigma_core
from sigma_core import plugins
from sigma_core.cli import main
from sigmann_predict.probabilities import class_probabilities

RUN = """
name = "pixels"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "npz"
path = "{data}"
preprocess = [{{ normalise = {{ input_range = [0, 255] }} }}]
[[network.layers]]
type = "input"
shape = {shape}
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[training]
batch_size = 8
epochs = 1
[checkpoint]
directory = "{directory}"
every_epochs = 1
"""


def trained(tmp_path, shape, preprocess=None):
    """A checkpoint of a network on 8×6 pixel records of ``shape`` (uint8, 0..255), and those records."""
    tmp_path.mkdir(exist_ok=True)
    pixels = np.random.default_rng(0).integers(0, 256, (24, *shape), dtype=np.uint8)
    np.savez(tmp_path / "data.npz", inputs=pixels, targets=np.arange(24) % 3)
    run = RUN.format(data=(tmp_path / "data.npz").as_posix(), shape=list(shape), directory=tmp_path.as_posix())
    (tmp_path / "run.toml").write_text(run if preprocess is None else run.replace(
        "{ normalise = { input_range = [0, 255] } }", preprocess))
    assert main(["train", str(tmp_path / "run.toml"), "--quiet"]) == 0
    return tmp_path / "pixels-e1-i0.ckpt", pixels


def probabilities(capsys, tmp_path, *argv):
    capsys.readouterr()
    status = main([str(a) for a in (*argv, "--out", tmp_path / "p.npy")])
    assert status == 0, capsys.readouterr().err
    return np.load(tmp_path / "p.npy")


@pytest.mark.parametrize("shape", [(6, 8), (36,), (6, 8, 3)], ids=["greyscale", "flat-square", "rgb"])
def test_images_predict_as_their_raw_pixels(tmp_path, capsys, shape):
    checkpoint, pixels = trained(tmp_path, shape)
    files = []
    for index, record in enumerate(pixels[:4]):
        image = record.reshape(6, 6) if len(shape) == 1 else record
        files.append(tmp_path / f"{index}.png")
        Image.fromarray(image).save(files[-1])
    network = sigma_core.load(checkpoint, "numpy")
    expected = class_probabilities(network, network.predict(pixels[:4]))
    np.testing.assert_allclose(probabilities(capsys, tmp_path, "predict", checkpoint, *files), expected, rtol=1e-5)
    np.save(tmp_path / "x.npy", pixels[:2])  # arrays and images mix, in argument order
    np.testing.assert_allclose(probabilities(capsys, tmp_path, "predict", checkpoint, files[3], tmp_path / "x.npy", files[2]),
                               expected[[3, 0, 1, 2]], rtol=1e-5)
    assert main(["export", str(checkpoint), "--format", "safetensors"]) == 0  # the export keeps the preprocessing
    np.testing.assert_allclose(probabilities(capsys, tmp_path, "predict", checkpoint.with_suffix(".safetensors"), *files),
                               expected, rtol=1e-5)
    capsys.readouterr()
    assert main(["predict", str(checkpoint), str(files[0]), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["class"] == expected[0].argmax()


def test_an_image_of_another_size_is_resized_to_the_input(tmp_path, capsys):
    checkpoint, pixels = trained(tmp_path, (6, 8))
    Image.fromarray(pixels[0]).resize((16, 12), Image.NEAREST).save(tmp_path / "big.png")
    resized = np.asarray(Image.open(tmp_path / "big.png").resize((8, 6)), np.float64)
    network = sigma_core.load(checkpoint, "numpy")
    np.testing.assert_allclose(probabilities(capsys, tmp_path, "predict", checkpoint, tmp_path / "big.png"),
                               class_probabilities(network, network.predict(resized[None])), rtol=1e-5)


def test_a_standardised_run_takes_raw_images_too(tmp_path, capsys):
    """The checkpoint holds the fitted mean and deviation: an image predicts as its record did in training."""
    checkpoint, pixels = trained(tmp_path, (6, 8), preprocess="{ standardise = true }")
    Image.fromarray(pixels[5]).save(tmp_path / "5.png")
    network = sigma_core.load(checkpoint, "numpy")
    record = (pixels[5:6] - pixels.mean(axis=0)) / pixels.std(axis=0)  # as the run standardised it
    np.testing.assert_allclose(probabilities(capsys, tmp_path, "predict", checkpoint, tmp_path / "5.png"),
                               class_probabilities(network, network.predict(pixels[5:6])), rtol=1e-5)
    network.preprocessing = None  # the network itself, on the standardised record
    np.testing.assert_allclose(probabilities(capsys, tmp_path, "predict", checkpoint, tmp_path / "5.png"),
                               class_probabilities(network, network.predict(record)), rtol=1e-5)


def test_image_errors_are_one_line(tmp_path, capsys, monkeypatch):
    checkpoint, pixels = trained(tmp_path, (6, 8))
    Image.fromarray(pixels[0]).save(tmp_path / "0.png")
    np.save(tmp_path / "flat.npy", np.zeros((2, 48)))
    assert main(["predict", str(checkpoint), str(tmp_path / "flat.npy"), str(tmp_path / "0.png")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: the inputs have different record shapes: (48,), (6, 8)"
    (tmp_path / "bad.png").write_bytes(b"not a png")
    assert main(["predict", str(checkpoint), str(tmp_path / "bad.png")]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"error: {tmp_path / 'bad.png'}: cannot read it as an image")
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert main(["predict", str(checkpoint), str(tmp_path / "0.png")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {tmp_path / '0.png'}: the 'png' reader of sigmann-images cannot run here: Pillow is not installed")


def test_a_network_whose_input_is_no_image_says_so(tmp_path, capsys):
    checkpoint, _ = trained(tmp_path, (5, 2, 2))
    Image.new("L", (2, 5)).save(tmp_path / "0.png")
    capsys.readouterr()
    assert main(["predict", str(checkpoint), str(tmp_path / "0.png")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {tmp_path / '0.png'}: images need a network input of (pixels of a square,), (height, width) or "
        "(height, width, 1 | 3 | 4 channels); this network takes (5, 2, 2)")


def test_without_this_plugin_an_image_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    checkpoint, pixels = trained(tmp_path, (6, 8))
    Image.fromarray(pixels[0]).save(tmp_path / "0.png")
    monkeypatch.setenv("SIGMA_PLUGINS", "sigmann-predict,sigmann-transforms")  # sigma predict, no image reader
    plugins.reset()
    try:
        capsys.readouterr()
        assert main(["predict", str(checkpoint), str(tmp_path / "0.png"), "--handler", "numpy"]) == 2
        assert capsys.readouterr().err.splitlines()[-1:] == [
            f"error: {tmp_path / '0.png'}: unknown input format 'png' (sigma predict reads .npy, .npz, .csv, - for JSON "
            "on stdin); docs/distributions.md lists the plugins that provide more"]
    finally:
        monkeypatch.delenv("SIGMA_PLUGINS")
        plugins.reset()  # the next test sees every installed plugin again


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` × ``height`` greyscale pixels and holds none: a decompression bomb's header."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


@pytest.mark.parametrize("width, height", [(20_000, 20_000), (10_000, 9_000)])  # over Pillow's ceiling; over ours
def test_a_decompression_bomb_is_refused_by_its_pixel_count_before_decoding(tmp_path, capsys, monkeypatch,
                                                                            width, height):
    from sigmann_images import decode

    checkpoint, _ = trained(tmp_path, (6, 8))
    (tmp_path / "bomb.png").write_bytes(png_header(width, height))
    monkeypatch.setattr(Image.Image, "convert", lambda *a, **k: pytest.fail("decoded a bomb"))
    capsys.readouterr()
    assert main(["predict", str(checkpoint), str(tmp_path / "bomb.png")]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("sigma: ")]
    assert line.startswith(f"error: {tmp_path / 'bomb.png'}: ") and line.endswith(
        "refused before decoding (a damaged file, or a decompression bomb)")
    assert f"{width * height}" in line.replace(",", "") or f"{width:,} × {height:,}" in line
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # Pillow's own check switched off: ours still holds
    assert main(["predict", str(checkpoint), str(tmp_path / "bomb.png")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {tmp_path / 'bomb.png'}: an image of {width:,} × {height:,} pixels, more than the "
        f"{decode.MAX_PIXELS:,} an image may have: refused before decoding (a damaged file, or a decompression bomb)")

"""Target maximisation on a digits network trained in the test: the dreamed input is one the network assigns the
class with at least 0.9 probability, the network itself is untouched, and sigma dream writes the picture."""

import numpy
import pytest

from sigma_core import build_run, cli, save_checkpoint

from sigmann_debug.dream import dream
from sigmann_debug.dream import Settings
from sigmann_debug.dream import DreamResult
from sigmann_debug.images import blurred, image_shape, write_dreams


@pytest.fixture(scope="module")
def trained():
    """A digits MLP trained for 5 epochs on the numpy handler (~97% held out), and its run."""
    import copy
    import tomllib
    from pathlib import Path

    from sigma_core import validate_run

    raw = tomllib.loads((Path(__file__).resolve().parents[3] / "examples" / "digits.toml").read_text())
    raw = copy.deepcopy(raw)
    raw["handler"], raw["training"]["epochs"] = {"name": "numpy", "dtype": "float64"}, 5
    run = build_run(validate_run(raw))
    run.train()
    return run


def probabilities(network, inputs):
    logits = network.forward({"inputs": network.handler.asarray(inputs[None])}).outputs["predictions"].to_numpy()
    exp = numpy.exp(logits - logits.max())
    return (exp / exp.sum())[0]


@pytest.mark.parametrize("target", [3, 7])
def test_a_dreamed_digit_is_that_class_for_the_network_with_at_least_90_percent(trained, target):
    network = trained.trainer.network
    before = {pid: array.to_numpy() for pid, array in network.parameters.items()}
    result = dream(network, target)
    assert result.reached and result.cost <= 0.06 and result.steps <= 1024
    assert result.inputs.shape == (64,) and result.inputs.min() >= 0.0 and result.inputs.max() <= 1.0  # clipped
    assert probabilities(network, result.inputs)[target] >= 0.9
    for pid, array in network.parameters.items():  # a copy was optimised: the network is untouched
        assert numpy.array_equal(array.to_numpy(), before[pid]), pid


def test_a_target_out_of_range_is_one_line_naming_it(trained):
    with pytest.raises(Exception, match=r"^target 10: the network predicts 10 classes \(0..9\)$"):
        dream(trained.trainer.network, 10)


def test_an_unreachable_cost_gives_the_best_of_the_attempts_made(trained):
    result = dream(trained.trainer.network, 1, Settings(desired_cost=1e-12, max_steps=3, attempts=2))
    assert not result.reached and result.attempts == 2 and result.steps == 3


def test_sigma_dream_writes_a_grid_of_every_class_and_prints_each_cost(trained, tmp_path, capsys):
    from PIL import Image

    path = save_checkpoint(trained.trainer, trained.config, tmp_path / "digits.ckpt")
    assert cli.main(["dream", str(path), "--target", "2", "--target", "5", "--out", str(tmp_path / "d.png"),
                     "--handler", "numpy", "--blur", "0.5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["target 2", "target 5"], lines
    assert lines[-1] == f"wrote {tmp_path / 'd.png'}"
    picture = Image.open(tmp_path / "d.png")
    assert picture.size == ((8 + 1) * 2 * 4 + 4, (8 + 1) * 4 + 4)  # two 8x8 digits, 1-pixel lines, 4x scale


def test_sigma_dream_refuses_a_bad_target_in_one_line(trained, tmp_path, capsys):
    path = save_checkpoint(trained.trainer, trained.config, tmp_path / "digits.ckpt")
    assert cli.main(["dream", str(path), "--target", "-1"]) == 2
    assert "a class index is an integer >= 0, got '-1'" in capsys.readouterr().err


def test_inputs_of_a_square_size_or_two_axes_are_images_and_others_not():
    assert image_shape((64,)) == (8, 8) and image_shape((28, 28)) == (28, 28) and image_shape((784,)) == (28, 28)
    assert image_shape((10,)) is None and image_shape((9,)) is None and image_shape((3, 8, 8)) is None


def test_the_dream_hook_writes_a_grid_into_the_run_folder_every_n_epochs(tmp_path, monkeypatch):
    import copy
    import tomllib
    from pathlib import Path

    from PIL import Image

    from sigma_core import validate_run
    from sigmann_debug.dream_hook import Dream

    monkeypatch.chdir(tmp_path)
    raw = tomllib.loads((Path(__file__).resolve().parents[3] / "examples" / "digits.toml").read_text())
    raw = copy.deepcopy(raw)
    raw["handler"], raw["training"]["epochs"] = {"name": "numpy", "dtype": "float32"}, 4
    run = build_run(validate_run(raw))
    hook = Dream(every=2, targets=[0, 1, 2], max_steps=20)
    hook.name = "dream"
    run.train([hook])
    folder = run.loop.directory / "dreams"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch_0002.png", "epoch_0004.png", "latest.png"]
    assert Image.open(folder / "latest.png").size == ((8 + 1) * 3 * 4 + 4, (8 + 1) * 4 + 4)
    assert (folder / "latest.png").read_bytes() == (folder / "epoch_0004.png").read_bytes()


def test_the_blur_keeps_a_constant_image_and_spreads_a_point_evenly_keeping_its_sum():
    flat = numpy.full((1, 64), 0.5)
    assert numpy.allclose(blurred(flat, 1.0, (8, 8)), flat, rtol=0, atol=1e-15)
    point = numpy.zeros((1, 64))
    point[0, 3 * 8 + 3] = 1.0  # (3, 3): a radius of 3 stays inside the 8x8 image
    spread = blurred(point, 1.0, (8, 8)).reshape(8, 8)
    assert spread[3, 2] == spread[3, 4] == spread[2, 3] == spread[4, 3] < spread[3, 3]
    assert abs(spread.sum() - 1.0) < 64 * numpy.finfo(float).eps  # 64 terms of a normalised kernel


def test_a_target_vector_is_dreamed_as_a_class_is(trained):
    network = trained.trainer.network
    result = dream(network, numpy.eye(10)[4].tolist())
    assert result.reached and probabilities(network, result.inputs)[4] >= 0.9


def test_inputs_that_are_no_images_are_written_as_npy(tmp_path):
    results = [DreamResult(t, numpy.full(10, float(t)), 0.01, 5, 1) for t in range(3)]
    path = write_dreams(results, (10,), tmp_path / "dream.png")
    assert path == tmp_path / "dream.npy"
    assert numpy.array_equal(numpy.load(path), numpy.repeat([[0.0], [1.0], [2.0]], 10, axis=1))

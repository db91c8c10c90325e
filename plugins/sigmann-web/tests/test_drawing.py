"""The drawing pad's strokes become the image a digit network trained on (MNIST's geometry), and a drawing is raw
input: the run's fitted preprocessing applies to it as to the training data."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import ConfigError, Dataset, Preprocessing
from sigmann_web.drawing import BOX, MAX_POINTS, PEN, digit_image, strokes_array
from sigmann_web.hook import data_range, infer


def centre_of_mass(image):
    rows, columns = numpy.indices(image.shape) + 0.5
    return (image * columns).sum() / image.sum(), (image * rows).sum() / image.sum()


def extent(image):
    rows, columns = numpy.nonzero(image > 0.5)
    return rows.max() - rows.min() + 1, columns.max() - columns.min() + 1


def test_a_small_thin_stroke_is_scaled_into_the_box_and_centred_not_a_blob():
    """A 1 drawn 20 canvas pixels tall in a corner of the 240-pixel pad: as tall as MNIST's box, as thin as its
    pen, its centre of mass at the centre of 28×28 (a symmetric line's: exactly)."""
    image = digit_image(strokes_array([[10, 10, 10, 30]]), (28, 28))
    height, width = extent(image)
    box, pen = BOX * 28, PEN * BOX * 28
    assert 20 - 1 <= height <= 20 and width <= numpy.ceil(pen) + 1
    # the ink of a line the pen's width wide, box - pen long, with round caps, give or take a sample's spacing
    # (a quarter pixel) of width along its length; a blob of the canvas pen scaled up would hold ten times more
    ink = pen * (box - pen) + numpy.pi * (pen / 2) ** 2
    assert image.max() == 1 and image.sum() == pytest.approx(ink, abs=box / 4)
    assert centre_of_mass(image) == pytest.approx((14, 14), abs=1e-6)


def test_the_aspect_ratio_is_kept_and_the_size_drawn_does_not_matter():
    small = strokes_array([[0, 0, 40, 0, 40, 20]])  # an upside-down L, twice as wide as tall
    large = strokes_array([[0, 0, 200, 0, 200, 100]])
    image = digit_image(small, (28, 28))
    height, width = extent(image)
    assert width == round(BOX * 28) and height == pytest.approx(width / 2 + PEN * 20 / 2, abs=1.5)
    assert centre_of_mass(image) == pytest.approx((14, 14), abs=1 / 4)  # within a sample's spacing (MNIST: a pixel's)
    # drawn five times larger: the same image (a sample at the pen's very edge may fall either way)
    assert numpy.abs(digit_image(large, (28, 28)) - image).max() <= 1 / 16


def test_small_grids_are_filled_edge_to_edge_like_scikit_learns_digits():
    image = digit_image(strokes_array([[5, 5, 5, 60], [0, 60, 10, 60]]), (8, 8))
    assert (image[0] > 0).any() and (image[-1] > 0).any()  # top to bottom
    assert image.shape == (8, 8) and 0 <= image.min() and image.max() <= 1


def test_a_dot_is_a_dot_of_the_pen():
    image = digit_image(strokes_array([[3, 4]]), (28, 28))
    assert 0 < (image > 0).sum() <= 16 and centre_of_mass(image) == pytest.approx((14, 14), abs=1e-6)


@pytest.mark.parametrize("strokes", [[], [[]], [[1, 2, 3]], [[1, True]], "1,2", [["1", "2"]], [1, 2]])
def test_malformed_strokes_are_one_line(strokes):
    with pytest.raises(ConfigError, match=r"strokes must be a non-empty array of strokes, each an array of x, y "):
        strokes_array(strokes)


def test_too_many_points_are_refused_before_any_work():
    with pytest.raises(ConfigError, match=f"strokes: at most {MAX_POINTS} points, got {MAX_POINTS + 1}"):
        strokes_array([[0.0, 1.0] * (MAX_POINTS + 1)])


def test_strokes_are_predicted_through_the_api_with_the_image_the_network_saw(live):
    run = live()
    answer = run.post("/api/predict", strokes=[[100, 40, 100, 200], [80, 60, 100, 40]]).json()
    assert len(answer["probabilities"]) == 10 and answer["predicted"] == numpy.argmax(answer["probabilities"])
    seen = numpy.array(answer["pixels"])
    assert seen.shape == (8, 8) and seen.max() > 0.5
    numpy.testing.assert_allclose(seen, digit_image(strokes_array([[100, 40, 100, 200], [80, 60, 100, 40]]), (8, 8)),
                                  atol=1e-4)  # rounded to 4 places for the page
    for body, message in [({}, "give the drawing as strokes or as pixels (one of them)"),
                          ({"strokes": [[1, 2]], "pixels": [0.0] * 64}, "give the drawing as strokes or as pixels"),
                          ({"strokes": [[1, 2, 3]]}, "strokes must be a non-empty array of strokes")]:
        refused = run.post("/api/predict", **body)
        assert refused.status_code == 400 and refused.json()["error"].startswith(message), body


def test_a_drawing_is_raw_input_the_fitted_preprocessing_changes(live):
    """Blank..ink become the raw range, then the network's preprocessing applies: as for ``sigma predict``."""
    run = live(input_range=[0, 16])
    network = run.trainer.network
    rng = numpy.random.default_rng(0)
    network.preprocessing = Preprocessing([{"standardise": {"mean": rng.uniform(0, 16, (8, 8)).tolist(),
                                                            "std": rng.uniform(1, 4, (8, 8)).tolist()}}])
    pixels = numpy.zeros((8, 8))
    pixels[1:7, 3:5] = 1.0
    run.post("/api/control", action="pause")
    answer = run.post("/api/predict", pixels=pixels.tolist()).json()
    outputs = infer(run.trainer, network.preprocessing.inputs((16 * pixels)[None]).astype("float32")).reshape(-1)
    expected = numpy.exp(outputs - outputs.max()) / numpy.exp(outputs - outputs.max()).sum()
    numpy.testing.assert_allclose(answer["probabilities"], expected, atol=1e-6)  # the answer is rounded to 6 places


def test_the_default_range_is_the_raw_inputs_the_preprocessing_saw(built):
    run = built()
    assert data_range(run.trainer) == run.trainer.network.preprocessing.raw_range  # synthetic data, no transforms
    run.trainer.network.preprocessing = Preprocessing([{"standardise": True}])
    run.trainer.network.preprocessing.fit(lambda: [Dataset({"inputs": numpy.array([[0.0], [255.0]])})])
    assert data_range(run.trainer) == (0.0, 255.0)

"""The maxout layer passes the layer author's kit on every installed handler."""

import pytest

from sigmann_maxout import Maxout
from sigmann_testing import check_layer


@pytest.mark.parametrize("pieces", [1, 3])
def test_maxout_passes_check_layer(pieces, sigma_handlers):
    outputs = check_layer(Maxout, input_shapes=[(2, 3)], size=4, pieces=pieces)
    assert set(outputs) == set(sigma_handlers) and all(output.shape == (3, 4) for output in outputs.values())


def test_maxout_is_registered_under_its_name():
    check_layer("maxout", size=2, handlers=["numpy"])

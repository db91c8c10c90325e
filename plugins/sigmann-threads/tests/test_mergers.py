"""Network mergers: Sigma's TestAverageNetworkMerger and TestWeightedNetworkMerger cases, and the weighting."""

from __future__ import annotations

import numpy as np
import pytest

from sigma_core.compute.backend import create_handler
from sigma_core.model.constructs import Dense, Input, Output
from sigma_core.errors import SigmaError
from sigma_core.model.network import Network
from sigmann_threads import AverageMerger, WeightedMerger


def network(value: float, handler=None) -> Network:
    """Sigma's test network, Input(2, 2) + FC(4) + Output(2), with every parameter set to ``value``."""
    net = Network(Input(2, 2) + Dense(4) + Dense(2) + Output())
    net.initialise(handler or create_handler("numpy", dtype="float64", seed=0))
    net.load_state_dict({pid: np.full(a.shape, value) for pid, a in net.state_dict().items()})
    return net


def values(net: Network, suffix: str) -> set:
    return {float(v) for pid, a in net.state_dict().items() if pid.endswith(suffix) for v in a.ravel()}


def test_average_merger_writes_the_mean_into_the_root_and_leaves_the_other_untouched():
    root, other = network(1.0), network(5.0)
    merger = AverageMerger("*.weights")
    merger.merge(root, [root, other])
    assert values(root, ".weights") == {3.0}
    assert values(root, ".biases") == {1.0}  # not a merge entry
    assert values(other, ".weights") == values(other, ".biases") == {5.0}

    merger.remove_entry("*.weights")
    root, other = network(1.0), network(5.0)
    merger.merge(root, [root, other])  # no entries left: nothing changes
    assert values(root, ".weights") == {1.0}
    with pytest.raises(SigmaError, match="no merge entry"):
        merger.remove_entry("*.weights")
    merger.add_entry("*")
    merger.merge(root, [root, other])
    assert values(root, "s") == {3.0}


def test_weighted_merger_and_networks_on_different_handlers():
    root, other = network(1.0), network(9.0, create_handler("numpy", dtype="float32", seed=1))
    WeightedMerger([3, 8]).merge(root, [root, other])
    assert {round(v, 2) for v in values(root, "s")} == {6.82}  # (3·1 + 8·9) / 11
    assert values(other, "s") == {9.0}
    with pytest.raises(SigmaError, match="2 weights for 3 networks"):
        WeightedMerger([1, 2]).merge(root, [root, other, other])
    with pytest.raises(SigmaError, match="positive sum"):
        WeightedMerger([0, 0])


def test_merge_arrays_weights_by_records_and_skips_zero_weights():
    a = {"x": np.array([1.0, 2.0]), "y": np.array([4.0])}
    b = {"x": np.array([3.0, 6.0]), "y": np.array([np.nan])}  # weight 0: never read
    merged = WeightedMerger([1, 0]).merge_arrays([a, b])
    np.testing.assert_array_equal(merged["x"], [1.0, 2.0])
    np.testing.assert_array_equal(merged["y"], [4.0])
    merged = WeightedMerger([1, 3]).merge_arrays([a, {"x": b["x"], "y": np.array([0.0])}])
    np.testing.assert_allclose(merged["x"], [2.5, 5.0])
    assert AverageMerger("y").merge_arrays([a, a]).keys() == {"y"}

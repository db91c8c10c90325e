"""The vision layers: gradients on every handler (check_layer), shapes, bad arguments in one line naming the layer
and key, the Python constructs, how Sigma lists and summarises them."""

from __future__ import annotations

import json

import numpy
import pytest

from sigma_core import ArchitectureError, ConfigError, Dense, Input, Network, NumpyHandler, SoftmaxCE, cli_main
from sigmann_testing import check_layer
from sigmann_vision import AvgPool2D, BatchNorm, Conv2D, Flatten, GlobalAvgPool, LayerNorm, MaxPool2D, Permute, Reshape

LAYERS = [
    ("conv2d", (2, 5, 5), {"channels": 3, "kernel": 3, "padding": "same", "stride": 2}, (3, 3, 3)),
    ("conv2d", (4, 5, 6), {"channels": 2, "kernel": [2, 3], "dilation": [2, 1], "groups": 2, "activation": "relu",
                           "padding": [1, 0, 1, 2]}, (2, 4, 7)),
    ("conv2d", (1, 4, 4), {"channels": 2, "kernel": 1, "bias": False}, (2, 4, 4)),
    ("max_pool2d", (2, 4, 5), {"kernel": 2, "padding": 1}, (2, 3, 3)),
    ("avg_pool2d", (2, 4, 5), {"kernel": [3, 2], "stride": 1}, (2, 2, 4)),
    ("global_avg_pool", (2, 3, 3), {}, (2,)),
    ("batch_norm", (2, 3, 3), {}, (2, 3, 3)),
    ("batch_norm", (4,), {"momentum": 0.5}, (4,)),
    ("layer_norm", (2, 3, 2), {}, (2, 3, 2)),
    ("reshape", (12,), {"shape": [3, 2, 2]}, (3, 2, 2)),
    ("flatten", (3, 2, 2), {}, (12,)),
    ("permute", (4, 3, 2), {"axes": [2, 0, 1]}, (2, 4, 3)),
]


@pytest.mark.parametrize("layer, shape, arguments, output", LAYERS, ids=[f"{t[0]}-{i}" for i, t in enumerate(LAYERS)])
def test_gradients_match_finite_differences_on_every_handler(layer, shape, arguments, output):
    outputs = check_layer(layer, input_shapes=[shape], **arguments)
    assert all(out.shape == (3, *output) for out in outputs.values())


def network(*layers):
    return Network(Input(1, 8, 8) + sum(layers[1:], layers[0]) if len(layers) > 1 else Input(1, 8, 8) + layers[0])


@pytest.mark.parametrize("layer, message", [
    (Conv2D(4, kernel=9, name="c"), "layer 'c': kernel height 9 .* larger than the padded input height 8"),
    (Conv2D(4, kernel=3, dilation=5, padding=1, name="c"), "layer 'c': kernel height 3 \\(dilation 5, spanning 11\\)"),
    (Conv2D(4, groups=3, name="c"), "layer 'c': groups = 3 does not divide the 1 input channels"),
    (Conv2D(4, padding="full", name="c"), "layer 'c': padding must be"),
    (Conv2D(4, kernel=[3, 3, 3], name="c"), "layer 'c': kernel must be one integer or \\[height, width\\]"),
    (MaxPool2D(2, padding=2, name="p"), "layer 'p': padding \\[2, 2, 2, 2\\] is more than half the kernel"),
    (MaxPool2D(9, name="p"), "layer 'p': kernel height 9"),
    (Reshape([3, 3], name="r"), "layer 'r': shape \\[3, 3\\] holds 9 values, the input records \\[1, 8, 8\\] 64"),
    (Permute([0, 0, 1], name="t"), "layer 't': axes \\[0, 0, 1\\] are not an order of the record's 3 axes"),
])
def test_bad_geometry_is_one_line_naming_the_layer(layer, message):
    with pytest.raises(ArchitectureError, match=message):
        network(layer)


def test_flat_input_to_conv2d_says_to_reshape():
    with pytest.raises(ArchitectureError, match="layer 'c': expects \\(channels, height, width\\) records, got "
                                                "per-record shape \\(784,\\); put a reshape layer before it"):
        Network(Input(784) + Conv2D(4, name="c"))


@pytest.mark.parametrize("key, value, message", [
    ("stride", 0, "stride: expected a positive integer or an array of them, got 0"),
    ("stride", [1, -1], "stride: expected a positive integer"),
    ("channels", 0, "channels: expected an integer >= 1, got 0"),
    ("groups", 0, "groups: expected an integer >= 1"),
])
def test_bad_arguments_name_the_layer_and_key(tmp_path, capsys, key, value, message):
    run = tmp_path / "run.toml"
    run.write_text(f"""
[data]
extractor = "synthetic"
n = 8
shape = [1, 6, 6]
classes = 2
[[network.layers]]
type = "input"
shape = [1, 6, 6]
[[network.layers]]
type = "conv2d"
{key} = {json.dumps(value)}
{"" if key == "channels" else "channels = 2"}
[[network.layers]]
type = "softmax_ce"
""")
    assert cli_main(["train", str(run), "--quiet", "--handler", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"network.layers[1] ('2-conv2d').{message}" in err[0], err


def test_batch_norm_arguments_are_checked():
    with pytest.raises(ConfigError, match="momentum: expected a finite number in \\[0, 1\\], got 1.5"):
        network(BatchNorm(momentum=1.5))
    with pytest.raises(ConfigError, match="eps: expected a finite number > 0"):
        network(LayerNorm(eps=0))


def test_a_small_cnn_from_constructs_has_the_shapes_and_parameters_it_says():
    net = Network(Input(8, 8) + Reshape([1, 8, 8]) + Conv2D(4, 3, padding="same", activation="relu", name="conv")
                  + BatchNorm(name="bn") + MaxPool2D(2) + Conv2D(6, [2, 2], groups=2) + AvgPool2D(3, stride=1)
                  + LayerNorm() + GlobalAvgPool() + Dense(3) + SoftmaxCE())
    shapes = [layer.output_shape for layer in net.layers.values()]
    assert shapes[1:9] == [(1, 8, 8), (4, 8, 8), (4, 8, 8), (4, 4, 4), (6, 3, 3), (6, 1, 1), (6, 1, 1), (6,)]
    assert net.parameter_count == (4 * 9 + 4) + 2 * 4 + (6 * 2 * 4 + 6) + 2 * 6 + (6 * 3 + 3)
    handler = NumpyHandler("float64", seed=0)
    net.initialise(handler)
    assert set(net.state) == {"bn.running_mean", "bn.running_var"}
    assert net.predict(numpy.ones((5, 8, 8))).shape == (5, 3)
    summary = net.summary()
    assert "(4, 8, 8)" in summary and f"{net.parameter_count:,} parameters" in summary
    flat = Network(Input(2, 3, 3) + Flatten() + Dense(2))
    assert [layer.output_shape for layer in flat.layers.values()] == [(2, 3, 3), (18,), (2,)]


def test_sigma_plugins_lists_the_layers_and_ops_from_this_distribution(capsys):
    assert cli_main(["plugins", "--json"]) == 0
    rows = {(row["kind"], row["name"]): row for row in json.loads(capsys.readouterr().out)}
    for kind in ("layer", "op"):
        for name in ("conv2d", "max_pool2d", "batch_norm"):
            assert rows[kind, name]["distribution"] == "sigmann-vision"


def test_the_web_dashboard_shows_the_first_convolutions_filters():
    hook = pytest.importorskip("sigmann_web.hook", reason="sigmann-web draws the weight images")
    from sigma_core import Trainer
    from sigma_core.training.optimisers import GradientDescent

    trainer = Trainer(Network(Input(28, 28) + Reshape([1, 28, 28]) + Conv2D(6, [3, 2], name="conv") + Flatten()
                              + Dense(10) + SoftmaxCE()), GradientDescent(0.1), training_iterator=[])
    trainer.initialise(NumpyHandler("float64", seed=0))
    layout = hook.layout(trainer)
    assert (layout["weights"], layout["tile"]) == ("conv.weights", (3, 2))
    filters = trainer.network.parameters["conv.weights"].to_numpy()
    numpy.testing.assert_array_equal(hook.weight_tiles(filters), filters.mean(axis=1).reshape(6, 6))


def test_the_bench_workload_compares_like_with_like():
    """sigma bench's cnn workload: joined through sigmann-bench's entry points; PyTorch starts from the same
    parameters, so its first step's cost is ours (one forward pass, float32, ~3,000-term sums)."""
    pytest.importorskip("sigmann_bench", reason="sigmann-bench runs the workload")
    from sigmann_bench.bench import extra_workloads
    from sigmann_vision import bench

    assert extra_workloads()["cnn"].load() is bench.CNN
    assert bench.CNN.systems(["cpu", "numpy"])[:3] == ["sigma-cpu", "sigma-numpy", "gemms-only"]
    batch = bench.make_batches(n=1)[0]
    ours = float(bench.make_step("sigma-numpy")(batch))
    assert bench.make_step("gemms-only")(batch) == 0.0
    if "pytorch-eager" in bench.CNN.systems(["numpy"]):
        theirs = bench.make_step("pytorch-eager")(batch)
        assert abs(theirs - ours) <= float(numpy.finfo("float32").eps) * 3136 ** 0.5 * 8 * max(1.0, ours)

"""Recorded training steps (sigmann_replay): every replayed step gives the bits of a normal one."""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path

import numpy
import pytest

from sigma_core import (ConfigError, Dense, Dropout, Input, Network, NonFiniteError, ShapeError, SoftmaxCE,
                        SquaredDifference, Trainer, build_run, create_handler)
from sigma_core import config as run_config
from sigma_core.cli import main
from sigma_core.data.dataset import from_arrays
from sigma_core.data.iterators import MinibatchIterator
from sigma_core.training.optimisers import Adam, GradientDescent, Optimiser
from sigmann_optimisers import Adagrad, Momentum
from sigmann_recurrent import LSTM
from sigmann_replay import Recording, StepReplay
from sigmann_replay.explain import explain

HANDLERS = ["numpy", "cpu"]


def mlp():
    return Input(6) + Dense(16, "relu") + Dropout(0.3) + Dense(8, "tanh") + Dense(3) + SoftmaxCE()


def data(records=50, shape=(6,), classes=3, seed=0):
    rng = numpy.random.default_rng(seed)
    return from_arrays(rng.normal(size=(records, *shape)).astype("float32"), rng.integers(0, classes, records))


def trainer(handler, replay, architecture=mlp, optimiser=None, dataset=None, batch_size=8):
    t = Trainer(Network(architecture()), optimiser or Adagrad(0.05), MinibatchIterator(dataset or data(), batch_size, seed=3))
    t.initialise(create_handler(handler, seed=7))
    if replay:
        t.compile_step(StepReplay.compile)
    return t


def train(t, epochs=3, between=None):
    """Costs of every step; ``between(trainer)`` runs after each step (a hook)."""
    costs = []
    for _ in range(epochs):
        t.run_epoch(lambda t: (costs.append(t.last_cost), between and between(t)))
    return costs


def state(t):
    opt = t.optimiser.state_dict()
    return (t.network.state_dict(), {pid: m for pid, m in opt["memory"].items()}, opt["parameter_steps"], opt["steps"],
            t.handler.rng_state(), t.epoch_cost)


def assert_same(a, b):
    """Every bit of two trainers' parameters, optimiser memory and counts, RNG state and epoch cost."""
    (pa, ma, *ra), (pb, mb, *rb) = state(a), state(b)
    assert pa.keys() == pb.keys() and ma.keys() == mb.keys() and ra == rb
    for key in pa:
        assert pa[key].tobytes() == pb[key].tobytes(), key
    for key in ma:
        for name in ma[key]:
            assert ma[key][name].tobytes() == mb[key][name].tobytes(), (key, name)


def replayed(t) -> int:
    return StepReplay.of(t).replayed


@pytest.mark.parametrize("handler", HANDLERS)
def test_replayed_steps_are_bit_identical_with_dropout_and_a_short_last_batch(handler):
    off, on = trainer(handler, False), trainer(handler, True)  # 50 records in batches of 8: a last batch of 2
    assert train(off) == train(on)
    assert_same(off, on)
    assert replayed(on) >= 3 * 7 - 4  # all but the first two steps of each signature
    assert sum(isinstance(r, Recording) for r in StepReplay.of(on).cache.values()) == 2


@pytest.mark.parametrize("handler", HANDLERS)
def test_a_learning_rate_schedule_takes_effect_in_replayed_steps(handler):
    def schedule(t):
        t.optimiser.learning_rate *= 0.9

    off, on, constant = (trainer(handler, r, optimiser=Adam(0.01, weight_decay=0.01)) for r in (False, True, True))
    costs = train(on, between=schedule)
    assert train(off, between=schedule) == costs
    assert_same(off, on)
    assert replayed(on) > 10
    assert train(constant) != costs  # the schedule changed something


@pytest.mark.parametrize("handler", HANDLERS)
def test_freezing_and_unfreezing_a_layer_records_again(handler):
    def toggle(t):
        if t.total_iterations == 5:
            t.optimiser.freeze("2-dense.*")
            t.refresh_trainable()
        if t.total_iterations == 12:
            t.optimiser.unfreeze("2-dense.*")
            t.refresh_trainable()

    off, on = trainer(handler, False), trainer(handler, True)
    weights = []
    train(on, between=lambda t: (toggle(t), weights.append(t.network.parameters["2-dense.weights"].to_numpy())))
    train(off, between=toggle)
    assert_same(off, on)
    assert all(numpy.array_equal(weights[5], w) for w in weights[6:12])  # frozen while frozen
    assert replayed(on) > 10


@pytest.mark.parametrize("handler", HANDLERS)
def test_an_lstm_step_is_replayed_bit_for_bit(handler):
    def lstm():
        return Input(5, 3) + LSTM(6, sequences=False) + Dense(3) + SoftmaxCE()

    dataset = data(records=24, shape=(5, 3))
    off, on = (trainer(handler, r, architecture=lstm, dataset=dataset) for r in (False, True))
    assert train(off) == train(on)
    assert_same(off, on)
    assert replayed(on) >= 3 * 3 - 2


@pytest.mark.parametrize("handler", HANDLERS)
def test_explain_names_an_op_and_its_vjp_by_the_op_s_name(handler):
    """The recorder sees a registered op as one call of the kernel that runs them all, ``run_op``; the table names
    the op (``lstm_sequence``: on cpu its registered kernel class, FusedLSTMSequence, ran)."""
    def lstm():
        return Input(5, 3) + LSTM(6, sequences=False) + Dense(3) + SoftmaxCE()

    t = trainer(handler, True, architecture=lstm, dataset=data(records=24, shape=(5, 3)))
    train(t, epochs=1)
    kernels = [line.split()[0] for line in explain(StepReplay.of(t).last).splitlines()[2:-1]]
    assert kernels.count("lstm_sequence") == 1 and kernels.count("lstm_sequence.backward") == 1
    assert "run_op" not in kernels


@pytest.mark.parametrize("handler", HANDLERS)
def test_reset_and_a_changed_layer_are_noticed(handler):
    def meddle(t):
        if t.total_iterations == 6:
            t.network.layers["3-dropout"].p = 0.5  # as the web monitor does
        if t.total_iterations == 9:
            t.optimiser.load_state_dict(t.optimiser.state_dict(), t.handler)  # new memory arrays

    off, on = trainer(handler, False), trainer(handler, True)
    assert train(off, between=meddle) == train(on, between=meddle)
    assert_same(off, on)
    on.reset(), off.reset()
    assert train(off, 1) == train(on, 1)
    assert_same(off, on)


def _shared(t):  # the parameter's buffer replaced, as data-parallel workers do
    weights = t.network.parameters["2-dense.weights"]
    t.handler.share(weights, weights.to_numpy() * 0.5)


#: Every way an edit reaches a recorded step (the versions of trainer, network, optimiser and handler), and the
#: hyperparameters it reads.
EDITS = {
    "a layer's attribute": lambda t: setattr(t.network.layers["3-dropout"], "p", 0.5),
    "parameters loaded": lambda t: t.network.load_state_dict({k: v * 0.5 for k, v in t.network.state_dict().items()}),
    "optimiser state loaded": lambda t: t.optimiser.load_state_dict(
        {**t.optimiser.state_dict(), "hyperparameters": {"learning_rate": 0.02, "momentum": 0.5, "weight_decay": 0.0}},
        t.handler),
    "a filter frozen, then unfrozen": lambda t: (t.optimiser.unfreeze if "4-dense.*" in t.optimiser.filters
                                                 else t.optimiser.freeze)("4-dense.*"),
    "a filter frozen, then filters cleared": lambda t: (t.optimiser.clear_filters() if t.optimiser.filters
                                                        else t.optimiser.freeze("4-dense.*")),
    "filters cleared, then the trainable set refreshed": lambda t: (t.optimiser.clear_filters() if t.optimiser.filters
                                                                    else t.refresh_trainable()),
    "a parameter's buffer": _shared,
    "another optimiser": lambda t: setattr(t, "optimiser", Momentum(0.03)),
    "the learning rate": lambda t: setattr(t.optimiser, "learning_rate", 0.02),
    "the momentum": lambda t: setattr(t.optimiser, "momentum", 0.5),
    "the weight decay": lambda t: setattr(t.optimiser, "weight_decay", 0.03),
    "the weight decay off, then on": lambda t: setattr(t.optimiser, "weight_decay", 0.0 if t.optimiser.weight_decay else 0.03),
    "updates published": lambda t: setattr(t.optimiser, "publish_updates", True),
}


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("edit", EDITS)
def test_an_edit_between_replayed_steps_is_noticed(handler, edit):
    """Mid-run (twice): the replayed run keeps every bit of the unrecorded one, and replays again after it."""
    seen, published = [], []

    def meddle(t):
        if t.total_iterations in (8, 14):
            seen.extend([replayed(t)] if StepReplay.of(t) is not None else [])
            EDITS[edit](t)
        published.append("updates" in t.optimiser.published)

    freeze = ("2-dense.biases",) if edit.startswith("filters cleared") else ()
    off, on = (trainer(handler, r, optimiser=Momentum(0.05, weight_decay=0.01, freeze=freeze)) for r in (False, True))
    assert train(off, between=meddle) == train(on, between=meddle)
    assert_same(off, on)
    assert seen[0] > 3 and replayed(on) - seen[0] >= (0 if edit == "updates published" else 5)
    assert published == [edit == "updates published" and i >= 8 for _ in (off, on) for i in range(21)]


def test_a_step_that_reads_data_to_the_host_runs_normally_and_says_so_once(caplog):
    def layers():
        return Input(6) + Dense(4) + Dense(3) + SoftmaxCE()

    def host_read(t):
        layer = t.network.layers["2-dense"]
        forward = type(layer).forward

        def data_dependent(handler, inputs, params, context):
            y = forward(layer, handler, inputs, params, context)
            return y if handler.to_numpy(y).sum() > 0 else handler.negative(y)

        layer.forward = data_dependent
        return t

    off, on = host_read(trainer("numpy", False, layers)), host_read(trainer("numpy", True, layers))
    with caplog.at_level(logging.INFO, logger="sigma"):
        assert train(off) == train(on)
    assert_same(off, on)
    assert replayed(on) == 0
    notes = [r.getMessage() for r in caplog.records if "not replayed" in r.getMessage()]
    assert len(notes) == 1 and "moves data between the host and the handler (to_host)" in notes[0]


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("handler", HANDLERS)
def test_a_non_finite_cost_stops_a_replayed_step_before_the_update(handler):
    def squared():
        return Input(6) + Dense(3) + SquaredDifference()

    dataset = from_arrays(numpy.full((40, 6), 30.0, "float32"), numpy.full((40, 3), 1.0, "float32"))
    errors, parameters = [], []
    for replay in (False, True):
        t = trainer(handler, replay, squared, GradientDescent(5.0), dataset)
        before = []
        with pytest.raises(NonFiniteError) as error:
            train(t, 5, between=lambda t: before.append(t.network.state_dict()))
        errors.append(str(error.value))
        assert all(numpy.array_equal(before[-1][k], v) for k, v in t.network.state_dict().items())
        parameters.append(t.total_iterations)
    assert errors[0] == errors[1] and parameters[0] == parameters[1] > 3


@pytest.mark.parametrize("handler", HANDLERS)
def test_bad_labels_are_caught_in_a_replayed_step(handler):
    t = trainer(handler, True)
    batch = {"inputs": numpy.ones((8, 6), "float32"), "targets": numpy.zeros(8, numpy.int64)}
    for _ in range(4):
        t.run_iteration(batch)
    assert replayed(t) == 2
    with pytest.raises(ShapeError, match="class label 3 is outside 0..2"):
        t.run_iteration({**batch, "targets": numpy.full(8, 3, numpy.int64)})


def test_a_layer_can_say_it_cannot_be_replayed(caplog):
    t = trainer("numpy", True)
    t.network.layers["4-dense"].replayable = False
    with caplog.at_level(logging.INFO, logger="sigma"):
        train(t, 1)
    assert replayed(t) == 0
    assert "layer '4-dense' says it cannot be replayed" in caplog.text


def test_inputs_that_need_a_copy_and_the_bounded_cache():
    t = trainer("numpy", True)
    StepReplay.of(t).size = 2
    rng = numpy.random.default_rng(1)
    for rows in (4, 5, 6, 4, 5, 6, 4):
        # float64 inputs are converted (copied) into the handler's float32, a list of labels too
        t.run_iteration({"inputs": rng.normal(size=(rows, 6)), "targets": list(rng.integers(0, 3, rows))})
    assert len(StepReplay.of(t).cache) == 2
    off = trainer("numpy", False)
    rng = numpy.random.default_rng(1)
    on = trainer("numpy", True)
    for _ in range(5):
        batch = {"inputs": rng.normal(size=(4, 6)), "targets": list(rng.integers(0, 3, 4))}
        assert float(off.run_iteration(batch)) == float(on.run_iteration(batch))
    assert_same(off, on)
    assert replayed(on) == 3


DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits.toml"


def digits(**training) -> dict:
    raw = tomllib.loads(DIGITS.read_text())
    raw["handler"]["name"] = "numpy"
    raw["training"].update(epochs=1, **training)
    return run_config.validate(raw)


def compiled(run) -> str:
    step = run.trainer.compiled_step
    return "replay" if StepReplay.of(run.trainer) else "none" if step == run.trainer.training_step else repr(step)


def test_sigma_train_replays_by_default_and_training_compile_none_turns_it_off():
    on, off = build_run(digits()), build_run(digits(compile="none"))
    assert (compiled(on), compiled(off)) == ("replay", "none")
    assert on.train()["cost"] == off.train()["cost"]
    assert_same(on.trainer, off.trainer)
    assert StepReplay.of(on.trainer).replayed > 30  # float64 inputs: copied into the recorded float32 buffer
    assert compiled(build_run(digits(compile="replay"))) == "replay"
    with pytest.raises(ConfigError, match="training.compile: expected a string, got True"):
        run_config.validate({**tomllib.loads(DIGITS.read_text()), "training": {"compile": True}})
    with pytest.raises(ConfigError, match="training.compile: unknown compiler 'replai' \\(did you mean 'replay'"):
        build_run(digits(compile="replai"))


def test_the_older_training_replay_key_still_works():
    """``replay = true`` was the default and is in every older checkpoint's run file: "auto", never an error."""
    assert compiled(build_run(digits(replay=True))) == "replay"
    assert compiled(build_run(digits(replay=False))) == "none"
    with pytest.raises(ConfigError, match="training.replay is the older spelling of training.compile; give only"):
        digits(replay=True, compile="replay")


def test_without_this_plugin_auto_trains_as_written_and_a_named_replay_is_an_error(monkeypatch):
    from sigma_core import plugins

    monkeypatch.setenv("SIGMA_PLUGINS", "sklearn,transforms")  # a core-only install with the digits, in effect
    plugins.reset()
    try:
        assert compiled(build_run(digits())) == compiled(build_run(digits(replay=True))) == "none"
        with pytest.raises(ConfigError) as error:
            build_run(digits(compile="replay"))
        assert str(error.value) == ("training.compile: unknown compiler 'replay' (available: none); "
                                    "docs/distributions.md lists the plugins that provide more")  # sigmann-replay
    finally:
        monkeypatch.delenv("SIGMA_PLUGINS")
        plugins.reset()


def test_sigma_explain_prints_every_kernel_with_buffers_bytes_and_flops(capsys):
    assert main(["explain", str(DIGITS), "--handler", "numpy"]) == 0
    out = capsys.readouterr().out
    first = next(line for line in out.splitlines() if "dense(relu)" in line)
    # 32x64 @ 64x128 (2·m·k·n) plus bias and relu; reads the batch and the layer's parameters, writes t1
    assert "batch.inputs, 2-dense.weights, 2-dense.biases" in first and " t1 " in first and "532,480" in first
    assert "updates.adam" in out and "first_moment" in out and "skipped" in out
    assert out.splitlines()[-1].startswith("total: 20 kernel calls")  # a dense backward: one activation_backward_sum


def test_sigma_train_explain_prints_the_recorded_step_once_and_trains_on(tmp_path, capsys, monkeypatch):
    from sigma_core.model.layers.dropout import Dropout as DropoutLayer

    assert main(["explain", str(DIGITS), "--handler", "numpy"]) == 0
    table = capsys.readouterr().out.strip()
    runs = {"on": [], "off": ["--set", 'training.compile="none"'], "refused": []}
    for name, extra in runs.items():
        if name == "refused":
            monkeypatch.setattr(DropoutLayer, "replayable", False, raising=False)
        out = tmp_path / f"{name}.json"
        assert main(["train", str(DIGITS), "--handler", "numpy", "--quiet", "--explain", "--set", "training.epochs=2",
                     "--out", str(out), *extra]) == 0
        runs[name] = capsys.readouterr().err
        assert json.loads(out.read_text())["epochs"] == 2  # trained on
    assert runs["on"].count("recorded training step of run 'digits'") == 1 and table in runs["on"]
    assert "run 'digits': training steps are not recorded (training.compile = 'none'): nothing to explain" in runs["off"]
    assert ("run 'digits': the training step cannot be recorded (layer '3-dropout' says it cannot be replayed); "
            "it runs normally") in runs["refused"]
    assert all("kernel calls" not in runs[name] for name in ("off", "refused"))


def test_a_replayed_run_resumes_from_a_checkpoint_of_an_unrecorded_one_bit_for_bit(tmp_path):
    def config(directory, replay):
        raw = {**digits(replay=replay), "checkpoint": {"directory": str(directory), "every_iterations": 15,
                                                       "every_epochs": 0, "keep": 100}}
        raw["training"]["epochs"] = 2
        return run_config.validate(raw)

    reference = build_run(config(tmp_path / "off", False))
    reference.train()
    resumed = build_run(config(tmp_path / "on", True))
    resumed.resume(tmp_path / "off" / "digits-e0-i30.ckpt")
    resumed.train()
    assert StepReplay.of(resumed.trainer).replayed > 30
    assert_same(reference.trainer, resumed.trainer)


def test_batch_sections_that_are_views_of_one_array_are_bound_apart():
    def regression():
        return Input(3) + Dense(4, "tanh") + Dense(1) + SquaredDifference()

    rng = numpy.random.default_rng(5)
    rows = [numpy.ascontiguousarray(rng.normal(size=(2, 8, 3)).astype("float32")) for _ in range(6)]
    off, on = (trainer(handler, replay, regression) for handler, replay in (("numpy", False), ("numpy", True)))
    for block in rows:  # inputs and targets: two contiguous slices of the same block
        batch = {"inputs": block[0], "targets": block.reshape(-1)[24:32].reshape(8, 1)}
        assert float(off.run_iteration(batch)) == float(on.run_iteration(batch))
    assert_same(off, on)
    assert replayed(on) == 4


def test_one_array_as_inputs_and_targets_runs_normally():
    def autoencoder():
        return Input(6) + Dense(3, "tanh") + Dense(6) + SquaredDifference()

    off, on = trainer("numpy", False, autoencoder), trainer("numpy", True, autoencoder)
    for i in range(5):
        x = numpy.full((4, 6), 0.1 * i, "float32")
        assert float(off.run_iteration({"inputs": x, "targets": x})) == float(on.run_iteration({"inputs": x, "targets": x}))
    assert_same(off, on)
    assert replayed(on) == 0 and "two batch sections are one array" in StepReplay.of(on).cache.values()


def test_cpu_launches_repeat_their_kernel_on_new_contents_of_the_same_buffers():
    """``kernels.launch``: the compiled path, checks made once, run again on whatever the buffers hold."""
    k, twin = (create_handler("cpu", seed=1).kernels for _ in range(2))
    rng = numpy.random.default_rng(2)
    x, y, w, b = (rng.normal(size=s).astype("float32") for s in ((4, 6), (4, 6), (6, 8), (8,)))
    one, labels, mass = numpy.array(1.5, "float32"), numpy.array([0, 5, 1, 3]), rng.random((4, 6)).astype("float32")
    cases = [("dense", (x, w, b, "relu")), ("dense", (x, w, None, "relu")), ("dense", (x, w, b, "none")),
             ("activation_backward", ("tanh", x, y)), ("activation_backward", ("relu", x, y)), ("sum", (x, 0)),
             *(("activation_backward_sum", (name, x, y, True)) for name in ("relu", "tanh", "none")),
             ("softmax_cross_entropy", (x, labels)), ("softmax_cross_entropy", (x, mass)),
             ("softmax_cross_entropy_backward", (one, y, labels)), ("softmax_cross_entropy_backward", (one, y, mass))]
    for name, args in cases:
        result = getattr(k, name)(*args)
        launch = k.launch(name, args, {}, result)
        for a in (x, y, w, b, one):  # new contents, same buffers
            a[...] = rng.normal(size=a.shape)
        expected = getattr(twin, name)(*args)
        expected = [e.tobytes() for e in (expected if isinstance(expected, tuple) else (expected,))]
        launch()
        assert [r.tobytes() for r in (result if isinstance(result, tuple) else (result,))] == expected, (name, args[-1])
    # dropout: each launch draws the next mask, as the kernel would
    for kernels in (k, twin):
        kernels.streams.calls = 0
    first = k.dropout(x, 0.4)
    launch = k.launch("dropout", (x, 0.4), {}, first)
    twin.dropout(x, 0.4)
    launch()
    assert [r.tobytes() for r in first] == [r.tobytes() for r in twin.dropout(x, 0.4)] and k.streams.calls == 2
    # where the recorded call took the reference path there is no launch
    assert k.launch("dense", (x, w, b, "sigmoid"), {}, k.dense(x, w, b, "sigmoid")) is None
    assert k.launch("sum", (x.T, 0), {}, k.sum(x.T, 0)) is None
    assert not hasattr(create_handler("numpy").kernels, "launch")  # the core offers none: launches are a backend's


@pytest.mark.parametrize("rule", ["sgd", "momentum", "adagrad", "adadelta", "rmsprop", "adam"])
def test_an_update_launch_takes_each_steps_hyperparameters(rule):
    k, twin = (create_handler("cpu").kernels for _ in range(2))
    rng = numpy.random.default_rng(3)
    hyper = {"sgd": {"lr": 0.1}, "momentum": {"lr": 0.1, "momentum": 0.9, "nesterov": True},
             "adagrad": {"lr": 0.1, "eps": 1e-7}, "adadelta": {"lr": 1.0, "rho": 0.95, "eps": 1e-6},
             "rmsprop": {"lr": 0.01, "rho": 0.9, "eps": 1e-7},
             "adam": {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-7, "step": 1}}[rule]
    count = {"sgd": 2, "adam": 4, "adadelta": 4}.get(rule, 3)  # parameter, gradient, memory
    arrays = [numpy.abs(rng.normal(size=(3, 5))).astype("float32") for _ in range(count)]
    copies = [a.copy() for a in arrays]
    getattr(k.updates, rule)(*arrays, **hyper)
    getattr(twin.updates, rule)(*copies, **hyper)
    launch = k.updates.launch(rule, tuple(arrays), hyper, None)
    later = {**hyper, "lr": hyper["lr"] * 0.37, **({"step": 2} if rule == "adam" else {})}
    arrays[1][...] = copies[1][...] = rng.normal(size=(3, 5))  # a new gradient in the same buffer
    launch(**later)()
    getattr(twin.updates, rule)(*copies, **later)
    assert [a.tobytes() for a in arrays] == [c.tobytes() for c in copies]
    assert k.updates.launch("l2_gradient", (arrays[1], arrays[0], 0.1), {}, arrays[1]) is None


def test_replayed_cpu_steps_launch_and_a_batch_bound_anew_each_step_keeps_its_kernel(monkeypatch):
    import sigmann_replay.replay

    on = trainer("cpu", True)
    train(on, 1)
    forms = dict(zip((record[1] for record in StepReplay.of(on).last.records), StepReplay.of(on).last.forms))
    assert forms["dense"] == forms["softmax_cross_entropy"] == forms["adagrad"] == "launch"
    assert StepReplay.of(on).last.copied.keys() == {"inputs", "targets"}  # small sections: copied into the recording's buffers
    monkeypatch.setattr(sigmann_replay.replay, "COPY_MAX", 0)  # the batch's own arrays, bound in each replay
    off, on = trainer("cpu", False), trainer("cpu", True)
    assert train(off) == train(on)
    assert_same(off, on)
    records = StepReplay.of(on).last.records
    assert StepReplay.of(on).last.adopted.keys() == {"inputs", "targets"} and replayed(on) >= 3 * 7 - 4
    forms = [f for r, f in zip(records, StepReplay.of(on).last.forms) if r[1] in ("dense", "softmax_cross_entropy")]
    # the first dense layer and the cost read the batch; tanh is not fused on cpu (no launch either)
    assert forms == ["kernel", "kernel", "launch", "kernel"]
    assert "launch" in StepReplay.of(on).last.forms  # the layers after the first still launch


class Signum(Optimiser):
    """A plugin optimiser as docs/plugins.md writes one: update() in handler ops, not reading the step count."""

    memory_names, stepwise = ("momentum",), False

    def __init__(self, learning_rate=0.01, beta=0.9, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.beta = beta

    def update(self, handler, param, grad, memory, step):
        (momentum,) = memory
        if self.weight_decay:
            grad = grad + self.weight_decay * param
        handler.fill(momentum, self.beta * momentum + (1.0 - self.beta) * grad)
        handler.fill(param, param - self.learning_rate * handler.sign(momentum))


class BiasCorrected(Signum):
    """One whose update reads the step count (and says so: stepwise stays True)."""

    stepwise = True

    def update(self, handler, param, grad, memory, step):
        super().update(handler, param, grad * (1.0 / (1.0 - self.beta ** step)), memory, step)


@pytest.mark.parametrize("handler", HANDLERS)
def test_a_plugin_optimisers_update_is_replayed_bit_for_bit_and_a_schedule_takes_effect(handler):
    def halve(t):  # a schedule: the recorded update calls hold the old rate, so the next step is recorded anew
        if t.iteration == 3:
            t.optimiser.learning_rate /= 2

    off, on = (trainer(handler, r, optimiser=Signum(0.01, weight_decay=0.001)) for r in (False, True))
    assert train(off, between=halve) == train(on, between=halve)
    assert_same(off, on)
    assert off.optimiser.learning_rate == 0.01 / 8
    assert replayed(on) > 10  # of 21 steps: after each change the next step is recorded anew


def test_a_plugin_optimiser_whose_update_may_read_the_step_runs_normally_and_says_why(caplog):
    off, on = (trainer("numpy", r, optimiser=BiasCorrected(0.01)) for r in (False, True))
    with caplog.at_level(logging.INFO, logger="sigma"):
        assert train(off) == train(on)
    assert_same(off, on)
    assert replayed(on) == 0
    notes = [r.getMessage() for r in caplog.records if "not replayed" in r.getMessage()]
    assert notes == [f"trainer {on.name}: training steps are not replayed (optimiser BiasCorrected's update() may "
                     "read the step count (its class does not set stepwise = False), which a replay of its kernel "
                     "calls would not change); they run normally"]

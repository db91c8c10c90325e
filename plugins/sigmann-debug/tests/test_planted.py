"""A log(0) and a sqrt(-1) planted in a plugin layer, forward and in a VJP: the debug handler's report names the op,
the layer (name and index), the pass, the iteration and the element; stops the run or, with throw = false, counts."""

import logging
import re

import numpy
import pytest

from sigma_core import NonFiniteError, build_run, cli
from sigmann_debug.checks import BadValue
from sigmann_debug.handler import NOT_REPLAYED

#: The trap layer's place in digits_config's network: input, dense, trap, dense, softmax_ce.
LAYER = "in layer 'trap' (#2, Planted)"


def train_until_error(config, error=BadValue):
    run = build_run(config)
    run.trainer.initialise(run.handler)
    with pytest.raises(error) as caught:
        run.trainer.run_epoch()
    return str(caught.value)


@pytest.mark.parametrize("handler", ["debug:numpy", "debug:cpu"])
@pytest.mark.parametrize("fn, op, value", [("log", "log", "-inf"), ("sqrt", "sqrt", "nan")])
def test_a_bad_op_in_a_layers_forward_is_named_with_its_layer_pass_iteration_and_element(
        planted, digits_config, handler, fn, op, value):
    message = train_until_error(digits_config(handler, trap={"fn": fn, "at": 3}))
    assert message.startswith(f"debug: op {op!r} {LAYER}, forward, trainer 'digits', epoch 1, iteration 3: "
                              f"{value} at index [0, 0]"), message


@pytest.mark.parametrize("handler", ["debug:numpy", "debug:cpu"])
@pytest.mark.parametrize("fn, value", [("log", "-?inf"), ("sqrt", "nan")])  # g·log(0): inf of -g's sign
def test_a_bad_vjp_is_named_as_the_backward_pass_of_its_op_in_its_layer(planted, digits_config, handler, fn,
                                                                         value):
    message = train_until_error(digits_config(handler, trap={"fn": fn, "where": "backward", "at": 2}))
    expected = re.escape(f"debug: op 'planted_vjp' {LAYER}, backward (the gradient of input 0), trainer 'digits', "
                         "epoch 1, iteration 2: ") + f"{value} at index \\[0, 0\\]"
    assert re.fullmatch(expected, message), message


def test_without_the_debug_handler_only_the_cost_is_caught_and_nothing_names_the_op(planted, digits_config):
    message = train_until_error(digits_config("numpy", trap={"fn": "sqrt", "at": 3}), NonFiniteError)
    assert "debug:" not in message and "cost became nan" in message


def test_sigma_train_says_replay_is_off_stops_with_exit_2_one_line_and_keeps_the_last_good_checkpoint(
        planted, digits_config, tmp_path, capsys, monkeypatch):
    import tomli_w

    from sigma_core import load_checkpoint

    monkeypatch.chdir(tmp_path)
    batches = 45  # 1,437 training records in batches of 32
    config = digits_config("numpy", trap={"fn": "log", "at": batches + 5}, epochs=2,
                           checkpoint={"every_epochs": 1})
    (tmp_path / "run.toml").write_bytes(tomli_w.dumps(config).encode())
    assert cli.main(["train", "run.toml", "--handler", "debug:numpy"]) == 2
    err = capsys.readouterr().err
    assert f"training steps are not replayed ({NOT_REPLAYED}); they run normally" in err  # said, not silent
    errors = [line for line in err.splitlines() if "debug: op" in line]
    assert len(errors) == 1 and errors[0].startswith("error: debug: op 'log' in layer 'trap'"), errors
    assert "forward, trainer 'digits', epoch 2, iteration 5: -inf" in errors[0], errors
    (saved,) = tmp_path.glob("checkpoints/*.ckpt")  # the first epoch's, kept
    assert all(numpy.isfinite(array).all() for array in load_checkpoint(saved).parameters.values())


def test_with_throw_false_each_iteration_is_reported_once_and_counted_and_training_goes_on(
        planted, digits_config, capsys, caplog):
    from sigmann_debug.checking_hook import DebugChecks

    run = build_run(digits_config(trap={"fn": "big"}))
    run.trainer.initialise(run.handler)
    hook = DebugChecks(limit=1e4, throw=False)
    hook.name = "debug"
    with caplog.at_level(logging.WARNING, logger="sigma"):
        run.train([hook])
    iterations = run.trainer.total_iterations
    assert iterations == len(run.trainer.training_iterator) and run.handler.reports.count == iterations
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("debug: op")]
    assert len(warnings) == iterations
    assert warnings[0].startswith(f"debug: op 'multiply' {LAYER}, forward") and "above the limit 10000" in warnings[0]
    assert f"debug: {iterations} reports; the first: {warnings[0]}" in capsys.readouterr().err


def test_the_debug_hook_refuses_a_handler_that_checks_nothing(planted, digits_config):
    from sigmann_debug.checking_hook import DebugChecks

    run = build_run(digits_config("numpy"))
    run.trainer.initialise(run.handler)
    hook = DebugChecks()
    hook.name = "debug"
    with pytest.raises(Exception, match=r"the run's handler is 'numpy', which checks nothing; choose --handler "
                                        r"debug:numpy"):
        run.train([hook])


def test_under_threads_a_workers_report_names_its_trainer_and_stops_the_run(planted, digits_config):
    from sigmann_threads import WorkerError

    config = digits_config(trap={"fn": "sqrt", "at": 3}, operator={"type": "threads", "workers": 2})
    run = build_run(config)
    run.trainer.initialise(run.handler)
    with pytest.raises(WorkerError, match=re.escape(f"BadValue: debug: op 'sqrt' {LAYER}, forward, trainer "
                                                    "'digits/worker") + r"\d', epoch 1, iteration 3: nan"):
        run.train()

"""A GPT's training steps recorded and replayed (sigmann-replay, the default step compiler) give the bits the
steps as written give: every buffer the ops return or save comes from the handler's pool, and dropout draws
from the handler's generator inside the op; with the output layer tied to the embedding too (one parameter, the
gradients of its two uses added up in the recorded step)."""

from __future__ import annotations

import numpy
import pytest

from sigma_core import Adam, Network, Trainer, create_handler, step_compiler
from sigmann_attention import GPT


def trained(handler_name, compiler, tie_weights=False, steps=6):
    trainer = Trainer(Network(GPT(11, 8, 16, 2, 2, dropout=0.1, tie_weights=tie_weights)), Adam(0.01),
                      training_iterator=[])
    trainer.initialise(create_handler(handler_name, dtype="float32", seed=0))
    trainer.compile_step(compiler)
    rng = numpy.random.default_rng(0)
    costs = []
    for _ in range(steps):
        text = rng.integers(0, 11, (4, 9))
        costs.append(float(trainer.run_iteration({"inputs": text[:, :-1], "targets": text[:, 1:, None]})))
    return trainer, costs


@pytest.mark.parametrize("tie_weights", [False, True], ids=["untied", "tied"])
def test_replayed_steps_are_the_steps_as_written(handler_name, tie_weights):
    replay = step_compiler("replay")
    if replay is None:
        pytest.skip("sigmann-replay is not installed")
    written, written_costs = trained(handler_name, None, tie_weights)
    replayed, replayed_costs = trained(handler_name, replay, tie_weights)
    assert replayed.compiled_step.__self__.replayed >= 3  # recorded at the second step, replayed after
    assert replayed_costs == written_costs
    for pid, param in written.network.parameters.items():
        numpy.testing.assert_array_equal(replayed.network.parameters[pid].to_numpy(), param.to_numpy(), err_msg=pid)

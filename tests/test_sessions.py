"""Who owns a handler array: a session's arrays expire with it; arrays made outside every session belong to no list.

Issue 24: the held-out evaluation after each epoch made its arrays between sessions, the handler appended them to
the last session's list, and a compiled step (replayed without a session) never emptied it: +13.8 MB per epoch.
"""

from __future__ import annotations

import numpy
import pytest
from sigmann_testing import ArrayCensus, Prober, live_arrays

from sigma_core import (CheckpointHook, Dense, Dropout, ExpiredArrayError, Input, Loop, Network,
                        SoftmaxCE, Trainer, create_handler)
from sigmann_monitors import MetricsHook
from sigmann_optimisers import Adagrad
from sigma_core.data.dataset import from_arrays
from sigma_core.data.iterators import MinibatchIterator

HANDLERS = ["numpy", "cpu"]


def test_arrays_made_outside_sessions_belong_to_no_list():
    h = create_handler("numpy", seed=0)
    x = h.asarray(numpy.ones(3))
    with h.session():
        h.add(x, 1.0)
    held = h.session_arrays  # the ended session's, readable until the next begins
    before = live_arrays()
    for _ in range(50):
        h.multiply(h.add(x, 2.0), 3.0).to_numpy()  # between sessions: evaluation, hooks, predictions
    assert h.session_arrays == held and live_arrays() == before


def test_detaching_a_session_lets_go_of_its_arrays_but_those_kept():
    h = create_handler("numpy", seed=0)
    x = h.asarray(numpy.arange(3.0))
    with h.session():
        temporary, cost = h.add(x, 1.0), h.sum(x)
    h.detach_session(cost)  # a compiled step owns the buffers now
    assert h.session_arrays == 0
    assert float(cost) == 3.0
    with pytest.raises(ExpiredArrayError):
        temporary.to_numpy()


def sessionless(trainer):
    """A step compiler that, as a replay does, runs every step after its first without a buffer session."""
    steps = iter(range(1, 10**9))

    def step(batch):
        if next(steps) == 1:
            return trainer.training_step(batch)
        cost, grads = trainer.gradients(batch)
        trainer.optimiser.step(trainer.handler, trainer.trainable_parameters, grads)
        return cost

    return step


def small_trainer(handler, compiler=None):
    rng = numpy.random.default_rng(0)
    inputs, labels = rng.normal(size=(120, 12)).astype("float32"), rng.integers(0, 4, 120)
    network = Network(Input(12) + Dense(24, "relu") + Dropout(0.3) + Dense(4) + SoftmaxCE())
    trainer = Trainer(network, Adagrad(0.05), MinibatchIterator(from_arrays(inputs[:80], labels[:80]), 16, seed=1),
                      validation={"validation": MinibatchIterator(from_arrays(inputs[80:], labels[80:]), 20)})
    trainer.initialise(create_handler(handler, seed=2))
    trainer.compile_step(compiler)
    return trainer, inputs[:5]


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("compiler", [None, sessionless], ids=["as written", "without sessions"])
def test_handler_arrays_do_not_pile_up_over_epochs(handler, compiler, tmp_path):
    trainer, batch = small_trainer(handler, compiler)
    census, prober = ArrayCensus(), Prober(batch)
    hooks = [MetricsHook(directory=str(tmp_path / "metrics")), CheckpointHook(str(tmp_path / "checkpoints")),
             prober, census]
    Loop(trainer, epochs=6, hooks=hooks).run()
    assert prober.predictions[0].shape == (5, 4)
    census.assert_flat()
    assert trainer.handler.session_arrays <= census.counts[0][1]  # one step's, at most

"""Recorded steps as CUDA graphs (sigma_cuda.graphs) on the emulated CuPy of sigma_cuda.emulation. NOT a GPU check.

The stand-in's streams keep the work issued while capturing (kernel launches,
CuPy calls into given buffers, fills and copies) for the graph's launches, and
refuse what a capture cannot hold (a CuPy call that would allocate, a read to
the host). So these tests check that a graph replay does all of a step's work
through the graph, reads what changes between steps from device scalars, and
gives the bits of unrecorded steps; test_cuda_gpu.py has their counterparts on
a device.
"""

from __future__ import annotations

import logging

import numpy
import pytest

from sigma_core import Adam, Construct, Input, SoftmaxCE
from sigmann_recurrent import LSTM
from sigmann_replay import Recording, StepReplay

from sigma_cuda.emulation import PinnedMemoryPointer
from sigma_cuda.emulation import emulated_cupy  # noqa: F401 (the stand-in, autouse: for every test here)
from .test_cuda_emulated import _trainer, emulated_cuda


def digits_trainer(dtype, replay, optimiser=None, **options):
    """The digits in batches of 200 (8 steps an epoch; a last batch of 197 with ``last_batch="keep"``)."""
    return _trainer(emulated_cuda(dtype, seed=3), replay=replay, optimiser=optimiser, size=200, **options)[0]


def steps(trainer, epochs=2, between=lambda trainer: None) -> list:
    """Each step's cost over ``epochs`` passes through the trainer's batches; ``between(trainer)`` after each."""
    costs = []
    for _ in range(epochs):
        for batch in trainer.training_iterator:
            costs.append(float(trainer.run_iteration(batch)))
            between(trainer)
    return costs


def assert_same(a, b):
    """Every bit of two trainers' parameters, optimiser memory and step counts, and dropout's counter."""
    sa, sb = a.optimiser.state_dict(), b.optimiser.state_dict()
    assert (sa["steps"], sa["parameter_steps"]) == (sb["steps"], sb["parameter_steps"])
    assert a.handler.kernels.streams.calls == b.handler.kernels.streams.calls
    for key, value in a.network.state_dict().items():
        assert value.tobytes() == b.network.state_dict()[key].tobytes(), key
    for pid, memory in sa["memory"].items():
        for name, value in memory.items():
            assert value.tobytes() == sb["memory"][pid][name].tobytes(), (pid, name)


def graphs(trainer) -> list:
    return [entry.captured for entry in StepReplay.of(trainer).cache.values() if isinstance(entry, Recording)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_graph_replayed_steps_are_bit_identical_to_unrecorded_ones(dtype):
    off, on = digits_trainer(dtype, False), digits_trainer(dtype, True)
    costs = steps(on, 3)
    assert steps(off, 3) == costs
    assert_same(off, on)
    (graph,) = graphs(on)
    assert graph.graph.launches == StepReplay.of(on).replayed == 3 * 8 - 2  # every step but the first two: one launch each
    assert len(graph.draws) == 1 and len(graph.rules) == 4  # dropout's key, each parameter's Adam scalars
    assert costs[-1] < costs[0]


def test_a_learning_rate_schedule_and_weight_decay_take_effect_in_graph_replays():
    def schedule(t):
        t.optimiser.learning_rate *= 0.8
        t.optimiser.weight_decay = 0.01 * t.total_iterations

    off, on, constant = (digits_trainer("float32", r, Adam(0.01, weight_decay=0.01)) for r in (False, True, True))
    costs = steps(on, between=schedule)
    assert steps(off, between=schedule) == costs
    assert_same(off, on)
    assert steps(constant) != costs  # the schedule changed something
    assert graphs(on)[0].graph.launches > 10


def test_dropout_masks_are_fresh_each_replay_and_those_of_unrecorded_steps():
    off, on = digits_trainer("float32", False), digits_trainer("float32", True)
    expected, dropout = [], off.handler.kernels.dropout

    def keep_mask(x, p):
        y, mask = dropout(x, p)
        expected.append(mask.get())
        return y, mask

    off.handler.kernels.dropout = keep_mask
    steps(off, 1)
    masks = []  # the recorded step's mask buffer, after the recorded step and each replay
    steps(on, 1, between=lambda t: StepReplay.of(t).last and masks.append(_recorded_mask(t).get()))
    assert len(masks) == len(expected) - 1 == 7
    for mask, reference in zip(masks, expected[1:]):
        assert mask.tobytes() == reference.tobytes()
    assert len({mask.tobytes() for mask in masks}) == 7


def _recorded_mask(trainer):
    recording = StepReplay.of(trainer).last
    return next(record[6][1] for record in recording.records if record[1] == "dropout")


def test_a_signature_change_falls_back_and_captures_again():
    def freeze(t):
        if t.total_iterations == 10:
            t.optimiser.freeze("2-dense.*")
            t.refresh_trainable()

    # 1,797 records in batches of 200: a short last batch of 197, another signature
    off, on = (digits_trainer("float64", r, last_batch="keep") for r in (False, True))
    frozen = []
    steps(on, 3, between=lambda t: (freeze(t), frozen.append(t.network.parameters["2-dense.weights"].to_numpy())))
    steps(off, 3, between=freeze)
    assert_same(off, on)
    assert len(graphs(on)) == 3  # full batches, the short one, full batches with a frozen layer
    assert all(numpy.array_equal(frozen[9], f) for f in frozen[10:])
    assert sum(g.graph.launches for g in graphs(on)) == StepReplay.of(on).replayed > 12


def test_a_step_that_allocates_while_captured_runs_normally_and_says_so_once(caplog):
    """The LSTM op's recurrent product reads a strided slice, which CuPy's matmul copies to a temporary: the
    capture declines, named by the op, once for both batch shapes, and every step runs normally."""
    def lstm():
        return Input(8, 8) + LSTM(6, sequences=False) + Construct("dense", size=10) + SoftmaxCE()

    off, on = (digits_trainer("float64", r, layers=lstm(), shape=(8, 8), last_batch="keep") for r in (False, True))
    with caplog.at_level(logging.INFO, logger="sigma"):
        assert steps(on, 2) == steps(off, 2)
    assert_same(off, on)
    assert StepReplay.of(on).replayed == 0
    declined = [r.getMessage() for r in caplog.records if "not captured" in r.getMessage()]
    assert len(declined) == 1, declined
    assert "(not captured: LSTMSequence.forward allocates device memory while captured as a CUDA graph)" in declined[0]


def test_a_step_that_reads_the_device_while_captured_runs_normally_and_says_so_once(caplog, monkeypatch):
    """A kernel that reads a value back (a synchronous copy, which CUDA refuses while capturing) declines too."""
    from sigma_cuda.kernels import CudaKernels

    generic = CudaKernels.activation_backward

    def reading(self, name, g, y):
        g.get()  # the read a capture refuses; nothing else changes
        return generic(self, name, g, y)

    monkeypatch.setattr(CudaKernels, "activation_backward", reading)
    off, on = digits_trainer("float32", False), digits_trainer("float32", True)
    with caplog.at_level(logging.INFO, logger="sigma"):
        assert steps(on, 2) == steps(off, 2)
    assert_same(off, on)
    assert StepReplay.of(on).replayed == 0
    declined = [r.getMessage() for r in caplog.records if "not captured" in r.getMessage()]
    # the recorded call is the dense layer's backward kernel, which calls activation_backward
    assert len(declined) == 1 and "not captured: activation_backward_sum failed while captured" in declined[0], declined


def test_replay_is_refused_where_a_handler_has_no_capture(monkeypatch):
    from sigma_cuda.kernels import CudaKernels

    monkeypatch.delattr(CudaKernels, "capture")
    trainer = digits_trainer("float32", True)
    steps(trainer, 1)
    assert StepReplay.of(trainer).replayed == 0
    assert "handler 'cuda' keeps its arrays off the host" in StepReplay.of(trainer).cache.values()


def test_uploads_after_a_capture_never_reuse_the_graphs_input_buffers():
    trainer = digits_trainer("float32", True)
    steps(trainer, 1)
    (graph,) = graphs(trainer)
    inputs = {id(device) for device in graph.inputs.values()}
    slots = trainer.handler.kernels.uploader._slots
    assert inputs and not inputs & {id(slot.device) for group in slots.values() for slot in group}
    assert StepReplay.of(trainer) is not None


def test_pinned_batches_from_the_prefetching_iterator_are_copied_from_where_they_are():
    from sigma_core.data import PrefetchIterator

    pinned, plain = digits_trainer("float32", True), digits_trainer("float32", True)
    batches = iter(PrefetchIterator(pinned.training_iterator, prepare=pinned.handler.pin_batch))
    costs = [float(pinned.run_iteration(next(batches))) for _ in range(5)]
    (graph,) = graphs(pinned)
    turn = graph.turns[0]  # the iterator's pinned arrays, not the graph's own
    assert len(turn.sources) == 2 and all(isinstance(source.base, PinnedMemoryPointer) and source is not turn.inputs[key]
                                          for key, source in zip(graph.inputs, turn.sources))
    batches.close()
    assert [float(plain.run_iteration(batch)) for batch in list(plain.training_iterator)[:5]] == costs
    assert_same(pinned, plain)


def test_sigma_explain_shows_the_step_a_cuda_graph_replays(monkeypatch, capsys):
    from pathlib import Path

    from sigma_core.compute import backend
    from sigma_core import cli_main

    monkeypatch.setattr(backend, "handler_availability", lambda name: (True, ""))  # the stand-in is no driver
    digits = Path(__file__).resolve().parents[2] / "examples" / "digits.toml"
    assert cli_main(["explain", str(digits), "--handler", "cuda"]) == 0
    rows = capsys.readouterr().out.splitlines()
    forms = [row.split()[1] for row in rows[2:-1]]
    assert rows[0].startswith("recorded training step of run 'digits' on <CudaHandler cuda:0 float32>: 20 kernel calls")
    assert forms.count("graph") == 16 and forms.count("check") == 1 and forms.count("skipped") == 3
    assert any(row.split()[0] == "updates.adam" and "first_moment" in row for row in rows)

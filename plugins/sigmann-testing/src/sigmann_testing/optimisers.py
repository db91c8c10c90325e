"""The optimiser kit: the checks every optimiser that names an update rule passes, whoever ships it.

Subclass :class:`OptimiserChecks` in a test module and fill :attr:`~OptimiserChecks.cases`; pytest runs each
check for each case. The core's tests check ``sgd`` and ``adam`` with it, sigmann-optimisers' tests the rest, so
the contract (a NumPy reference trajectory, freezing, checkpoints, no allocation on a warm step) is written once.
"""

from __future__ import annotations

import numpy
import pytest

from sigma_core import NumpyHandler, build


def layer_params(h, rng) -> dict:
    """A two-dense-layer network's parameters by id, drawn from ``rng``."""
    shapes = {"1-dense.weights": (4, 3), "1-dense.biases": (3,), "2-dense.weights": (3, 2), "2-dense.biases": (2,)}
    return {pid: h.asarray(rng.standard_normal(shape)) for pid, shape in shapes.items()}


def grads_for(h, params, rng) -> dict:
    return {pid: h.asarray(rng.standard_normal(p.shape)) for pid, p in params.items()}


class OptimiserChecks:
    """Checks of the optimisers in :attr:`cases` on the numpy handler (float64 unless said)."""

    #: Registered optimiser name -> ``(make() -> optimiser, reference(start, grads) -> the parameter after each
    #: gradient, a learning rate that reduces a quadratic loss by 10 % in 40 steps)``.
    cases: dict = {}

    def pytest_generate_tests(self, metafunc):
        if "name" in metafunc.fixturenames:
            metafunc.parametrize("name", sorted(self.cases))

    def test_three_steps_match_numpy_reference(self, name):
        """The reference is float64 NumPy of the same formula: agreement to a few ulps after three steps."""
        make, reference, _ = self.cases[name]
        h, rng = NumpyHandler("float64", 0), numpy.random.default_rng(1)
        start = rng.standard_normal((5, 4))
        grads = [rng.standard_normal((5, 4)) for _ in range(3)]
        param, optimiser = h.asarray(start), make()
        for g in grads:
            optimiser.step(h, {"w": param}, {"w": h.asarray(g)})
        numpy.testing.assert_allclose(param.to_numpy(), reference(start, grads), rtol=1e-12, atol=1e-14)
        assert optimiser.steps == 3

    def test_reduces_a_quadratic_loss(self, name):
        h, rng = NumpyHandler("float64", 0), numpy.random.default_rng(2)
        target = h.asarray(rng.standard_normal(10))
        param = h.asarray(rng.standard_normal(10) * 3)
        optimiser = build("optimiser", {"type": name, "learning_rate": self.cases[name][2]})

        def loss():
            return float(((param - target) * (param - target)).sum()) / 2

        before = loss()
        for _ in range(40):
            optimiser.step(h, {"p": param}, {"p": param - target})
        assert loss() < 0.9 * before

    def test_frozen_parameters_stay_bit_identical(self, name):
        h, rng = NumpyHandler("float64", 0), numpy.random.default_rng(3)
        params = layer_params(h, rng)
        optimiser = self.cases[name][0]()
        optimiser.freeze("*.biases")
        optimiser.freeze("1-dense.*")
        before = {pid: p.to_numpy() for pid, p in params.items()}
        grads = grads_for(h, params, rng)
        del grads["1-dense.biases"]  # a frozen parameter needs no gradient
        optimiser.step(h, params, grads)
        for pid in ("1-dense.weights", "1-dense.biases", "2-dense.biases"):
            assert numpy.array_equal(params[pid].to_numpy(), before[pid]), pid
        assert not numpy.array_equal(params["2-dense.weights"].to_numpy(), before["2-dense.weights"])
        assert optimiser.published["frozen"] == ["1-dense.weights", "1-dense.biases", "2-dense.biases"]

    def test_state_dict_round_trip_continues_identically(self, name):
        rng = numpy.random.default_rng(4)
        make = self.cases[name][0]
        h1, h2 = NumpyHandler("float64", 0), NumpyHandler("float64", 0)
        params1 = layer_params(h1, rng)
        grads = [grads_for(h1, params1, rng) for _ in range(4)]
        first = make()
        first.freeze("2-dense.biases")
        for g in grads[:2]:
            first.step(h1, params1, g)
        state = first.state_dict()
        saved = {pid: {k: v.copy() for k, v in buffers.items()} for pid, buffers in state["memory"].items()}

        params2 = {pid: h2.asarray(p.to_numpy()) for pid, p in params1.items()}
        second = make()
        second.load_state_dict(state, h2)
        assert second.filters == ("2-dense.biases",) and second.steps == 2
        for g in grads[2:]:
            first.step(h1, params1, g)
            second.step(h2, params2, {pid: h2.asarray(a.to_numpy()) for pid, a in g.items()})
        for pid in params1:
            assert numpy.array_equal(params1[pid].to_numpy(), params2[pid].to_numpy()), pid
        for pid, buffers in saved.items():  # the checkpoint is a copy, not a view of live memory
            for key, value in buffers.items():
                assert numpy.array_equal(state["memory"][pid][key], value)

    @pytest.mark.parametrize("extras", [False, True], ids=["plain", "decay+publish"])
    def test_step_in_a_session_allocates_nothing_after_warm_up(self, name, extras):
        h, rng = NumpyHandler("float32", 0), numpy.random.default_rng(5)
        params = layer_params(h, rng)
        targets = {pid: h.asarray(rng.standard_normal(p.shape)) for pid, p in params.items()}
        optimiser = self.cases[name][0]()
        if extras:
            optimiser.weight_decay = 0.01
            optimiser.publish_updates = True

        def iteration():
            with h.session():
                grads = {pid: params[pid] - targets[pid] for pid in params}
                optimiser.step(h, params, grads)

        iteration()  # warm-up: memory is made (and kept) here, buffers enter the pool
        allocations = h.allocations
        iteration()
        iteration()
        assert h.allocations == allocations
        assert all(p.dtype == "float32" for p in params.values())

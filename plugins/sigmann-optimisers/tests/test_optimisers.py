"""sigmann-optimisers: each optimiser against a NumPy reference (the kit's checks), its cpu kernel against its
reference rule, and an old run file naming one with and without the distribution."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy
import pytest

from sigma_core import NumpyHandler, build, create_handler
from sigmann_optimisers import Adadelta, Adagrad, Momentum, Nesterov, RMSProp
from sigmann_testing import OptimiserChecks


# -- hand-written NumPy references: (param, grads) -> param after each grad ---------------------
def ref_momentum(p, grads, lr, mu, nesterov=False):
    v = numpy.zeros_like(p)
    for g in grads:
        v = mu * v + g
        p = p - lr * (g + mu * v if nesterov else v)
    return p


def ref_adagrad(p, grads, lr, eps):
    s = numpy.zeros_like(p)
    for g in grads:
        s = s + g * g
        p = p - lr * g / (numpy.sqrt(s) + eps)
    return p


def ref_adadelta(p, grads, lr, rho, eps):
    eg, ex = numpy.zeros_like(p), numpy.zeros_like(p)
    for g in grads:
        eg = rho * eg + (1 - rho) * g * g
        dx = -numpy.sqrt(ex + eps) / numpy.sqrt(eg + eps) * g
        ex = rho * ex + (1 - rho) * dx * dx
        p = p + lr * dx
    return p


def ref_rmsprop(p, grads, lr, rho, eps):
    s = numpy.zeros_like(p)
    for g in grads:
        s = rho * s + (1 - rho) * g * g
        p = p - lr * g / (numpy.sqrt(s) + eps)
    return p


class TestOptimisers(OptimiserChecks):
    cases = {
        "momentum": (lambda: Momentum(0.05, 0.8), lambda p, gs: ref_momentum(p, gs, 0.05, 0.8), 0.05),
        "nesterov": (lambda: Nesterov(0.05, 0.8), lambda p, gs: ref_momentum(p, gs, 0.05, 0.8, nesterov=True), 0.05),
        "adagrad": (lambda: Adagrad(0.3), lambda p, gs: ref_adagrad(p, gs, 0.3, 1e-6), 0.5),
        "adadelta": (lambda: Adadelta(), lambda p, gs: ref_adadelta(p, gs, 1.0, 0.95, 1e-6), 1.0),
        "rmsprop": (lambda: RMSProp(0.01), lambda p, gs: ref_rmsprop(p, gs, 0.01, 0.9, 1e-8), 0.01),
    }


def test_a_learning_rate_set_between_steps_acts_at_once():
    """The velocity does not hold the learning rate (Sigma folded it in): a schedule's change applies to the
    next step whole."""
    h = NumpyHandler("float64")
    param = h.asarray([1.0])
    optimiser = Momentum(0.1, 0.5)
    optimiser.step(h, {"w": param}, {"w": h.asarray([1.0])})  # v = 1, p = 0.9
    optimiser.learning_rate = 0.0
    optimiser.step(h, {"w": param}, {"w": h.asarray([1.0])})
    numpy.testing.assert_allclose(param.to_numpy(), [0.9])


def test_built_from_a_run_file_table():
    optimiser = build("optimiser", {"type": "adagrad", "learning_rate": 0.02, "freeze": ["*.biases"]})
    assert isinstance(optimiser, Adagrad)
    assert optimiser.learning_rate == 0.02 and optimiser.filters == ("*.biases",)
    assert isinstance(build("optimiser", {"type": "nesterov"}), Nesterov)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("make", [lambda: Nesterov(0.1, 0.9), Adagrad, RMSProp, Adadelta],
                         ids=["nesterov", "adagrad", "rmsprop", "adadelta"])
def test_the_cpu_kernel_is_its_loop_and_matches_the_reference_rule(make, dtype):
    """The cpu handler runs the rule's numba loop (its kernel's ``loop``); one pass rounds differently from
    the reference's ufuncs only within a few ulps of the dtype per step."""
    pytest.importorskip("sigma_cpu")
    cpu, reference = create_handler("cpu", dtype=dtype), NumpyHandler(dtype)
    rng = numpy.random.default_rng(7)
    start, grads = rng.standard_normal((64, 33)), [rng.standard_normal((64, 33)) for _ in range(3)]
    results = []
    for h in (cpu, reference):
        optimiser, param = make(), h.asarray(start)
        for g in grads:
            optimiser.step(h, {"w": param}, {"w": h.asarray(g)})
        results.append(param.to_numpy())
    rule = make().rule
    assert type(cpu.kernels.updates.rules[rule]).__module__ == "sigmann_optimisers.cpu"
    assert cpu.kernels.updates.rules[rule].loop is not None
    eps = numpy.finfo(dtype).eps
    numpy.testing.assert_allclose(results[0], results[1], rtol=64 * eps, atol=64 * eps)


def _train(run_file, **env):
    return subprocess.run([sys.executable, "-m", "sigma_core", "train", str(run_file), "--quiet"],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=300)


def test_an_old_run_file_naming_momentum_trains(sigma_run_file):
    done = _train(sigma_run_file("optimiser.type=momentum", "optimiser.momentum=0.8"))
    assert done.returncode == 0, done.stderr


def test_without_the_distribution_the_error_names_it(sigma_run_file):
    done = _train(sigma_run_file("optimiser.type=adagrad"), SIGMA_PLUGINS="")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "'adagrad'" in lines[0] and "sigmann-optimisers" in lines[0], done.stderr

"""The ops seam: an op a third-party distribution registers (``register_ops``) runs on every handler through
``handler.op``, with its gradient, its kernel for a handler where it registered one, and clear errors."""

from __future__ import annotations

import importlib.util
import json

import numpy
import pytest

from sigma_core import cli, create_handler
from sigma_core.errors import ComponentLoadError, ShapeError, SigmaError

CPU = pytest.param("cpu", marks=pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="needs numba"))

CUBE = """
    from sigma_core import Op, ShapeError, hookimpl


    class Cube(Op):
        '''y = scale·x³, over any handler's array module.'''

        def forward(self, k, x, scale=1.0):
            out = k.empty(x.shape)
            k.xp.multiply(x, x, out=out)
            k.xp.multiply(out, x, out=out)
            k.xp.multiply(out, scale, out=out)
            return out, None

        def backward(self, k, g, inputs, out, saved, needs, scale=1.0):
            (x,) = inputs
            grad = k.multiply(x, x)
            k.xp.multiply(grad, 3.0 * scale, out=grad)
            k.xp.multiply(grad, g, out=grad)
            return (grad,)

        def check(self, inputs, params):
            if len(inputs) != 1:
                raise ShapeError(f"cube: takes one input, got {len(inputs)}")

        def examples(self):
            return [("cube", lambda rng: [rng.standard_normal((3, 4))], {"scale": 2.0})]


    class CountingCube(Cube):
        '''The numpy handler's kernel: the same rule, counting its calls.'''

        calls = 0

        def forward(self, k, x, scale=1.0):
            CountingCube.calls += 1
            return super().forward(k, x, scale)


    class WrongGradient(Cube):
        '''A VJP that sums over the first axis: a gradient of the wrong shape.'''

        def backward(self, k, g, inputs, out, saved, needs, scale=1.0):
            (grad,) = super().backward(k, g, inputs, out, saved, needs, scale)
            return (grad.sum(axis=0),)


    class WrongDtype(Cube):
        def backward(self, k, g, inputs, out, saved, needs, scale=1.0):
            (grad,) = super().backward(k, g, inputs, out, saved, needs, scale)
            return (grad.astype("float32"),)


    class OutOnly(Cube):
        '''A forward that returns its output alone, not (out, saved).'''

        def forward(self, k, x, scale=1.0):
            return super().forward(k, x, scale)[0]


    @hookimpl
    def register_ops(register):
        register("cube", Cube, kernels=KERNELS, description="scale·x³")
"""


def _install(fake_site, kernels="{}"):
    fake_site.add("sigmann-cube", entry_points={"cube": "cube_op"}, modules={"cube_op": CUBE.replace("KERNELS", kernels)})


def _cube(handler, value, **params):
    """The op's output and the gradient of its sum, as NumPy arrays."""
    with handler.tape() as tape:
        x = handler.asarray(value)
        tape.watch(x)
        out = handler.op("cube", x, **params)
        (grad,) = tape.gradient(handler.sum(out), [x])
    return out.to_numpy(), grad.to_numpy()


@pytest.mark.parametrize("handler_name", ["numpy", CPU])
def test_a_registered_op_runs_and_differentiates_on_every_handler(fake_site, handler_name):
    _install(fake_site)
    handler = create_handler(handler_name, dtype="float64", seed=0)
    x = numpy.random.default_rng(0).standard_normal((3, 4))
    out, grad = _cube(handler, x, scale=2.0)
    numpy.testing.assert_array_equal(out, 2.0 * x * x * x)  # the same operations in the same order
    numpy.testing.assert_array_equal(grad, x * x * 6.0)


def test_a_handler_runs_the_kernel_registered_for_it_and_others_the_rule(fake_site):
    _install(fake_site, kernels='{"numpy": "cube_op:CountingCube"}')
    from cube_op import CountingCube

    x = numpy.arange(6.0).reshape(2, 3)
    out, _ = _cube(create_handler("numpy", dtype="float64"), x)
    numpy.testing.assert_array_equal(out, x**3)
    assert CountingCube.calls == 1
    if importlib.util.find_spec("numba") is not None:  # the cpu handler has no kernel: the portable rule
        _cube(create_handler("cpu", dtype="float64"), x)
        assert CountingCube.calls == 1


def test_the_op_is_resolved_once_per_handler(fake_site, monkeypatch):
    from sigma_core.compute import ops

    _install(fake_site)
    resolved = []
    real = ops.resolve
    monkeypatch.setattr(ops, "resolve", lambda *a: resolved.append(a) or real(*a))
    handler = create_handler("numpy", dtype="float32")
    for _ in range(3):
        handler.op("cube", handler.ones((2,)))
    assert resolved == [("cube", "numpy")]


def test_a_broken_kernel_is_one_line_naming_the_op_the_handler_and_the_distribution(fake_site):
    _install(fake_site, kernels='{"numpy": "cube_op_numpy:Missing"}')
    handler = create_handler("numpy")
    with pytest.raises(ComponentLoadError) as error:
        handler.op("cube", handler.ones((2,)))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("the 'numpy' kernel of op 'cube' from sigmann-cube 0.1 cannot be loaded from "
                              "'cube_op_numpy:Missing': ModuleNotFoundError")


def test_a_kernel_that_is_not_an_op_is_named(fake_site):
    _install(fake_site, kernels='{"numpy": "cube_op:hookimpl"}')
    handler = create_handler("numpy")
    with pytest.raises(ComponentLoadError, match=r"^the 'numpy' kernel of op 'cube' from sigmann-cube 0.1 is .*"
                                                 r"not a sigma_core.Op subclass$"):
        handler.op("cube", handler.ones((2,)))


def test_an_unknown_op_lists_the_registered_ones(fake_site):
    _install(fake_site)
    handler = create_handler("numpy")
    with pytest.raises(SigmaError, match=r"^unknown op 'cubed' \(registered: .*\bcube\b.*\)$"):
        handler.op("cubed", handler.ones((2,)))


def test_the_op_checks_its_inputs_before_it_runs(fake_site):
    _install(fake_site)
    handler = create_handler("numpy")
    with pytest.raises(ShapeError, match=r"^cube: takes one input, got 2$"):
        handler.op("cube", handler.ones((2,)), handler.ones((2,)))


def test_kernels_are_for_ops_and_update_rules_only(fake_site):
    from sigma_core import plugins

    fake_site.add("sigmann-odd", entry_points={"odd": "odd_layer"}, modules={"odd_layer": """
        from sigma_core import hookimpl

        @hookimpl
        def register_layers(register):
            register("odd", "odd_layer:Odd", kernels={"cpu": "odd_layer:Fast"})
    """})
    assert [f.error for f in plugins.failures() if f.distribution == "sigmann-odd"] == [
        "TypeError: layer 'odd': kernels (a dict of handler name -> implementation) are for ops and update rules only"]


def test_sigma_plugins_lists_ops_with_their_distribution(fake_site, capsys):
    _install(fake_site)
    assert cli.main(["plugins", "--json"]) == 0
    rows = [row for row in json.loads(capsys.readouterr().out) if row["kind"] == "op"]
    assert {"name": "cube", "distribution": "sigmann-cube", "description": "scale·x³"}.items() <= \
        next(row for row in rows if row["name"] == "cube").items()


@pytest.mark.parametrize("kernel, got", [("WrongGradient", "(4,) float64"), ("WrongDtype", "(3, 4) float32")])
def test_a_backward_returning_the_wrong_shape_or_dtype_names_the_op_the_input_and_both(fake_site, kernel, got):
    """As PyTorch's autograd does: the op whose VJP is wrong, not the op the wrong gradient reaches next."""
    _install(fake_site, kernels=f'{{"numpy": "cube_op:{kernel}"}}')
    handler = create_handler("numpy", dtype="float64")
    with pytest.raises(ShapeError) as error:
        _cube(handler, numpy.ones((3, 4)))
    assert str(error.value) == (f"op 'cube': its backward returned a gradient of shape {got} for input 0, which is "
                                "(3, 4) float64")


def test_a_forward_that_breaks_the_out_saved_contract_is_one_line_naming_the_op(fake_site):
    _install(fake_site, kernels='{"numpy": "cube_op:OutOnly"}')
    handler = create_handler("numpy")
    with pytest.raises(SigmaError) as error:
        handler.op("cube", handler.ones((2, 2)))
    assert str(error.value) == "op 'cube': its forward returned ndarray, not the pair (out, saved)"


def test_sigma_train_names_the_op_whose_backward_is_wrong_in_one_line_exit_2(sigma_run_file, capsys, monkeypatch):
    from sigma_core.compute import ops

    real = ops.resolve

    def resolve(name, handler_name):  # the fused dense op, its weights' gradient a row short
        op = real(name, handler_name)
        if name == "dense":
            backward = op.backward
            op.backward = lambda k, *args, **params: tuple(
                grad[1:] if i == 1 else grad for i, grad in enumerate(backward(k, *args, **params)))
        return op

    monkeypatch.setattr(ops, "resolve", resolve)
    assert cli.main(["train", str(sigma_run_file()), "--quiet", "--handler", "numpy"]) == 2
    error = capsys.readouterr().err.splitlines()[-1]  # after the run's INFO lines: the handler, the records
    assert error.startswith("error: op 'dense': its backward returned a gradient of shape (4, 3) float32 for input 1, "
                            "which is (5, 3) float32"), error

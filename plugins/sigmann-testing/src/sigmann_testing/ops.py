"""``check_op``: what an op author runs before publishing an op, as ``check_layer`` is for a layer.

A handler distribution's own suite (:class:`~sigmann_testing.conformance.HandlerConformance`) checks every
registered op, but only where that suite runs, and with the ops installed there. An op distribution's tests
need the same checks for their op on the handlers installed beside it: :func:`check_op` runs the kit's own
test methods on each of the op's examples, on every installed handler, and adds the op buffer rule, which a
comparison of values cannot see (a rule that breaks it computes the right numbers once, then a recorded step
replays it with stale arrays).
"""

from __future__ import annotations

import numpy

from sigma_core import NumpyHandler, components, get_component

from .conformance import DTYPES, SEED, HandlerConformance, op_cases
from .layers import available_handlers


def check_op(name: str, handlers=None, *, state_inputs=()) -> list[str]:
    """Check the registered op ``name`` on every installed handler (or the handler names in ``handlers``).

    For each of its ``examples()``: the buffer rule (what ``forward`` returns and saves lies in buffers it took
    from ``k.empty``/``k.full``, or is an input, and neither rule writes its inputs or the incoming gradient),
    then the conformance kit's checks: the output and the gradients against the numpy handler in float32 and
    float64, and the gradients against central finite differences in float64. An op without examples
    fails: it cannot ship without a gradient check. ``state_inputs``: the positions of inputs that are a
    layer's state, which the op may move in place (``batch_norm``'s running statistics, 3 and 4).
    Returns the names of the handlers checked; failures are ``AssertionError``\\ s naming the op, the
    handler and the example.
    """
    registered = {c.name for c in components("op")}
    assert name in registered, f"check_op: no op {name!r} is registered (registered: {', '.join(sorted(registered))})"
    cases = [case for case in op_cases() if case.op == name]
    assert cases, f"op {name!r}: examples() gives no cases; give it one per branch of its rule"
    installed = {c.name: c for c in components("handler")}
    names = list(handlers or available_handlers())
    for handler_name in names:
        assert handler_name in installed, \
            f"check_op: no handler {handler_name!r} is installed (installed: {', '.join(installed)})"
        # The kit's test methods make their handlers with the class's handler_factory: one class per handler.
        kit = type("Kit", (HandlerConformance,), {"handler_factory": installed[handler_name].load()})()
        try:
            # The buffer rule first: breaking it skews the values too, which would hide the cause.
            _check_buffer_rule(kit.make_handler("float64"), name, state_inputs)
            for case in cases:
                kit.test_gradient_matches_finite_differences(case)
                for dtype in DTYPES:
                    kit.test_forward_matches_reference(kit.make_handler(dtype), NumpyHandler(dtype, SEED), case)
                    kit.test_gradient_matches_reference(kit.make_handler(dtype), NumpyHandler(dtype, SEED), case)
        except AssertionError as error:
            raise AssertionError(f"op {name!r} on handler {handler_name!r}: {error}") from error
    return names


def _check_buffer_rule(handler, name: str, state_inputs) -> None:
    """Run op ``name``'s rules (the handler's kernel of it if registered, as ``handler.op`` would) on each example
    inside a buffer session, and check the buffer rule (see :func:`check_op`)."""
    component = get_component("op", name)
    op = (component.load_kernel(handler.name) or component.load())()
    k = handler.kernels
    for label, make, params in op.examples():
        rng = numpy.random.default_rng(SEED)
        values = make(rng)
        inputs = [k.asarray(value) for value in values]
        unchanged = [(f"input {i}", array, value) for i, (array, value) in enumerate(zip(inputs, values))
                     if i not in state_inputs]
        with handler.session():
            start = k.pool.handed_out
            out, saved = op.forward(k, *inputs, **params)
            taken = [*k.pool.handed_out_since(start), *inputs]
            saved_arrays = [a for a in (saved if isinstance(saved, (tuple, list)) else (saved,))
                            if isinstance(a, k.xp.ndarray)]
            for what, array in (("its output", out), *(("a saved array", a) for a in saved_arrays)):
                assert any(k.xp.may_share_memory(array, buffer) for buffer in taken), \
                    f"{label}: forward returns or saves {what} {array.shape} that is not in a buffer from " \
                    "k.empty/k.full (write it there with out=: a recorded step replays the rule on the same buffers)"
            _assert_unchanged(k, unchanged, f"{label}: forward")
            g = k.asarray(rng.standard_normal(out.shape))
            unchanged.append(("the incoming gradient g", g, k.to_host(g)))
            op.backward(k, g, tuple(inputs), out, saved, (True,) * len(inputs), **params)
            _assert_unchanged(k, unchanged, f"{label}: backward")


def _assert_unchanged(k, arrays, where: str) -> None:
    """Each ``(what, raw array, host values)`` of ``arrays`` still holds its values (as cast to its dtype)."""
    for what, array, value in arrays:
        assert numpy.array_equal(k.to_host(array), numpy.asarray(value, dtype=array.dtype)), \
            f"{where} writes {what} (inputs are never written: a rule writes only the buffers it takes)"

"""``check_layer``: what a layer author runs before publishing a layer.

On every installed handler, in float64, it builds the layer, checks its
output and parameter shapes, checks that the same inputs give the same
outputs (inference, and training with the same random state), that every
handler agrees with the first, and compares the tape's gradients of a random
projection of the output with central finite differences, for every
parameter and every input, in inference and in training mode. Failures are
``AssertionError``s naming the layer, handler, mode and array.
"""

from __future__ import annotations

import numpy

from sigma_core import ForwardContext, build, components


def check_layer(layer, input_shapes=((4,),), *, batch: int = 3, seed: int = 0, handlers=None, eps: float = 1e-6,
                rtol: float = 1e-5, atol: float = 1e-7, samples: int = 20, inputs=None, **arguments) -> dict:
    """Check ``layer`` (a registered layer type name, or a ``Layer`` class) built with ``arguments``.

    ``handlers``: names to check (default: :func:`available_handlers`); a handler named here is built from its
    class even where its registration's check fails (a test's emulated device).
    ``inputs``: the batch to feed, one array (batch, *shape) or None per input; None is drawn uniform in [-1, 1).
    Integer arrays (token ids, class indices) are fed as the data path feeds them (as floats) and, being no
    variables, get no gradient check: an embedding's ids, say.
    Returns ``{handler name: outputs in inference mode}`` (NumPy) for further checks.
    """
    names = handlers or available_handlers()
    installed = {c.name: c for c in components("handler")}
    rng = numpy.random.default_rng(seed)
    built = _build(layer, [tuple(s) for s in input_shapes], arguments)
    assert isinstance(built.output_shape, tuple) and all(isinstance(n, int) and n > 0 for n in built.output_shape), \
        f"{built.name}: output_shape must be a tuple of positive ints, got {built.output_shape!r}"
    for param, shape in built.parameter_shapes.items():
        assert isinstance(shape, tuple) and all(isinstance(n, int) and n > 0 for n in shape), \
            f"{built.name}: parameter_shapes[{param!r}] must be a tuple of positive ints, got {shape!r}"
    given = [None] * len(built.input_shapes) if inputs is None else list(inputs)
    assert len(given) == len(built.input_shapes), \
        f"{built.name}: inputs holds {len(given)} arrays for {len(built.input_shapes)} inputs"
    constants = {i for i, x in enumerate(given) if x is not None and numpy.asarray(x).dtype.kind in "iub"}
    inputs = [rng.uniform(-1, 1, (batch, *shape)) if x is None else numpy.asarray(x, dtype=float)
              for x, shape in zip(given, built.input_shapes)]
    for i, (x, shape) in enumerate(zip(inputs, built.input_shapes)):
        assert x.shape == (inputs[0].shape[0], *shape), f"{built.name}: inputs[{i}] has shape {x.shape}, the layer " \
                                                        f"takes (batch, *{shape})"
    params = {p: rng.normal(0, 0.5, shape) for p, shape in built.parameter_shapes.items()}
    projection = rng.normal(size=(inputs[0].shape[0], *built.output_shape))
    outputs = {}
    for name in names:
        assert name in installed, f"check_layer: no handler {name!r} is installed (installed: {', '.join(installed)})"
        handler = installed[name].load()(dtype="float64", seed=seed)
        for training in (False, True):
            where = f"{built.name} on {name} ({'training' if training else 'inference'})"
            _check_mode(handler, _build(layer, built.input_shapes, arguments), inputs, params, projection, training,
                        where, eps, rtol, atol, samples, rng, constants)
        outputs[name] = _forward(handler, built, inputs, params, False).to_numpy()
        numpy.testing.assert_allclose(outputs[name], outputs[names[0]], rtol=1e-7, atol=1e-9,
                                      err_msg=f"{built.name}: {name} disagrees with {names[0]}")
    return outputs


def available_handlers() -> list[str]:
    """Names of the installed handlers that can run here (their registration's check passes), in name order."""
    return [c.name for c in components("handler") if c.availability()[0]]


def _build(layer, input_shapes, arguments):
    if isinstance(layer, str):
        return build("layer", {"type": layer, **arguments}, "layer", input_shapes)
    return layer("layer", input_shapes, **arguments)


def _forward(handler, layer, inputs, params, training, rng_state=None):
    if rng_state is not None:
        handler.set_rng_state(rng_state)
    context = ForwardContext(training=training)
    return layer.forward(handler, [handler.asarray(x) for x in inputs],
                         {**{p: handler.asarray(v) for p, v in params.items()}, **_state(handler, layer)}, context)


def _state(handler, layer) -> dict:
    """The layer's state arrays (``Layer.state_shapes``) as a new network would make them: every pass starts
    from them afresh, so a pass in training mode that moves them changes no later pass."""
    initial = layer.initial_state()
    return {key: handler.full(shape, initial.get(key, 0.0)) for key, shape in layer.state_shapes.items()}


def _check_mode(handler, layer, inputs, params, projection, training, where, eps, rtol, atol, samples, rng, constants):
    state = handler.rng_state()  # reseeded before each pass: dropout-like layers draw the same mask

    def cost(xs, ps):
        with handler.no_grad():
            return float((_forward(handler, layer, xs, ps, training, state).to_numpy() * projection).sum())

    first = _forward(handler, layer, inputs, params, training, state).to_numpy()
    assert first.shape == projection.shape, f"{where}: output shape {first.shape}, expected {projection.shape}"
    assert numpy.all(numpy.isfinite(first)), f"{where}: non-finite outputs"
    again = _forward(handler, layer, inputs, params, training, state).to_numpy()
    numpy.testing.assert_array_equal(again, first, err_msg=f"{where}: not deterministic for the same inputs and seed")
    handler.set_rng_state(state)
    xs, ps = [handler.asarray(x) for x in inputs], {p: handler.asarray(v) for p, v in params.items()}
    with handler.tape() as tape:
        tape.watch(*xs, *ps.values())
        out = layer.forward(handler, xs, {**ps, **_state(handler, layer)}, ForwardContext(training=training))
        grads = tape.gradient((out * handler.asarray(projection)).sum(), [*xs, *ps.values()])
    arrays = [(f"input {i}", i, x) for i, x in enumerate(inputs)] + [(f"parameter {p!r}", p, v) for p, v in params.items()]
    for (label, key, base), grad in zip(arrays, grads):
        if key in constants:  # ids: no variable to differentiate
            continue
        grad = numpy.zeros(base.shape) if grad is None else grad.to_numpy()
        assert grad.shape == base.shape, f"{where}: gradient of {label} has shape {grad.shape}, not {base.shape}"
        if isinstance(key, str):
            assert numpy.any(grad != 0), f"{where}: the output does not depend on {label} (is it used in forward?)"
        for i in rng.choice(base.size, min(samples, base.size), replace=False):
            moved = [base.copy(), base.copy()]
            moved[0].flat[i] += eps
            moved[1].flat[i] -= eps
            values = [cost(*_replace(inputs, params, key, m)) for m in moved]
            numeric = (values[0] - values[1]) / (2 * eps)
            assert abs(grad.flat[i] - numeric) <= atol + rtol * abs(numeric), \
                f"{where}: gradient of {label} at {tuple(map(int, numpy.unravel_index(i, base.shape)))} is {grad.flat[i]:.8g}, " \
                f"finite differences give {numeric:.8g}"


def _replace(inputs, params, key, value):
    """``inputs`` and ``params`` with input ``key`` (an index) or parameter ``key`` (a name) replaced by ``value``."""
    if isinstance(key, int):
        return [value if i == key else x for i, x in enumerate(inputs)], params
    return inputs, {**params, key: value}

"""Target maximisation: the input a trained network takes for a class ("what does it think a 7 looks like").

Sigma's ``TargetMaximisationHook``: from a small Gaussian start (sigma 0.01), gradient steps on the *input* lower the
network's own cost for the desired target until it is at most ``desired_cost`` (0.06: a softmax network then gives
the class e^-0.06 = 94%), in at most ``max_steps`` steps (1024), with a new start for each of ``attempts`` (2) that
falls short. The network is a copy and the optimiser a fresh Adam of its own, so training is untouched.

Unregularised, such inputs are noise the network happens to like. Three things make them pictures: an L2 penalty
on the input (``l2``), a clip to the range the network was trained on (``clip``, after each step), and an optional
Gaussian blur (``blur``, its sigma in pixels, every ``blur_every`` steps) for image-shaped inputs.
"""

import math
from dataclasses import dataclass

import numpy

from sigma_core import Adam, SigmaError

from sigmann_debug.images import blurred
from sigmann_debug.settings import Settings


@dataclass
class DreamResult:
    """The optimised input (NumPy, one record, the network's input shape) and the network's cost for it."""

    target: object
    inputs: numpy.ndarray
    cost: float
    steps: int  # in the attempt kept
    attempts: int  # made
    desired_cost: float = 0.06

    @property
    def reached(self) -> bool:
        return self.cost <= self.desired_cost


def dream(network, target, settings: Settings = Settings(), *, image_shape=None, seed: int = 0,
          handler=None) -> DreamResult:
    """Optimise one input so that ``network`` (left unchanged: a copy on ``handler``, default its own, is trained
    on) outputs ``target``: a class index, or a vector of the network's prediction shape. The best attempt wins;
    ``image_shape`` (height, width): how to blur the input."""
    twin = network.copy(handler)
    handler = twin.handler
    inputs_name, targets_name, input_shape, outputs = interface(twin)
    target_array = _target_array(target, outputs)
    s, rng = settings, numpy.random.default_rng(seed)
    best = None
    for attempt in range(1, s.attempts + 1):
        start = rng.normal(0.0, s.sigma, (1, *input_shape))
        if s.clip is not None:
            start = numpy.clip(start, *s.clip)
        x = handler.asarray(start)
        optimiser = Adam(learning_rate=s.learning_rate)
        targets = handler.asarray(target_array[None])
        cost, steps = math.inf, 0
        while steps < s.max_steps:
            steps += 1
            with handler.session(), handler.tape() as tape:
                tape.watch(x)
                result = twin.forward({inputs_name: x, targets_name: targets}, training=False)
                objective = result.cost if not s.l2 else result.cost + s.l2 * handler.mean(x * x)
                (grad,) = tape.gradient(objective, [x])
                cost = float(result.cost)
                if cost <= s.desired_cost:
                    break
                optimiser.step(handler, {"input": x}, {"input": grad})
                if s.clip is not None:
                    handler.fill(x, handler.clip(x, *s.clip))
            if s.blur and image_shape is not None and steps % s.blur_every == 0:
                handler.fill(x, handler.asarray(blurred(x.to_numpy(), s.blur, image_shape)))
        found = DreamResult(target, x.to_numpy()[0], cost, steps, attempt, s.desired_cost)
        best = found if best is None or found.cost < best.cost else best
        if best.reached:
            break
    return best


def interface(network):
    """``(input name, target name, input shape, prediction size)`` of a network with one input and a cost layer."""
    inputs = [layer for layer in network.layers.values()
              if getattr(layer, "external", None) is not None and not layer.input_shapes]
    costs = [layer for layer in network.layers.values() if layer.is_cost]
    if len(inputs) != 1 or not costs:
        raise SigmaError(f"network {network.name!r}: dreaming needs one input layer and a cost layer "
                         f"(it has {len(inputs)} input layer(s) and {len(costs)} cost layer(s))")
    return inputs[0].external, costs[0].targets_external, inputs[0].output_shape, math.prod(costs[0].input_shapes[0])


def _target_array(target, outputs: int) -> numpy.ndarray:
    """A class index as a one-hot row (cross-entropy and squared difference both take it), a vector as given."""
    if isinstance(target, (int, numpy.integer)):
        if not 0 <= target < outputs:
            raise SigmaError(f"target {target}: the network predicts {outputs} classes (0..{outputs - 1})")
        return numpy.eye(outputs)[target]
    vector = numpy.asarray(target, dtype=float)
    if vector.shape != (outputs,):
        raise SigmaError(f"target vector of shape {vector.shape}: the network predicts {outputs} values")
    return vector

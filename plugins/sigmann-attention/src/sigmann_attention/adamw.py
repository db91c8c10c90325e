"""The ``adamw`` optimiser: Adam with decoupled weight decay, decay exclusion by pattern and global-norm clipping.

Sigma's ``adam`` adds ``weight_decay·param`` to the gradient (coupled L2), so
the decay is divided by √v̂ like the gradient and weak where gradients are
large; AdamW (Loshchilov & Hutter, 2019) shrinks the parameter itself, by
``learning_rate·weight_decay`` per step, before the Adam update. Transformers
decay their weight matrices but not biases nor the normalisations' gain and
shift (``no_decay`` globs). Clipping by the global norm of all gradients keeps
the direction of a step and bounds its size: the early steps of a transformer
have rare, large gradients. Both follow ``torch.optim.AdamW`` and
``torch.nn.utils.clip_grad_norm_`` exactly.

It overrides :meth:`Optimiser.step` (the clip needs every gradient at once and
the decay each parameter's id), so sigmann-replay runs its steps as written.
The clip's norm is one op over every gradient (:class:`SquaredNorm`): as two
ops a gradient and a sum of their results it cost ~0.9 ms of the baby GPT's
step on the ``cpu`` handler (issue 39), in dispatch more than arithmetic.
"""

from __future__ import annotations

import fnmatch
import math

from sigma_core import Adam, Op, ShapeError


class SquaredNorm(Op):
    """Σ x² over every element of every input: the square of the global norm of a set of arrays, one number."""

    def check(self, inputs, params):
        if not inputs:
            raise ShapeError("squared_norm: takes one or more arrays, got none")

    def forward(self, k, *arrays):
        total = k.full((), 0.0)
        for a in arrays:
            flat = a.reshape(-1)
            total += k.xp.dot(flat, flat)  # BLAS's dot on NumPy: one pass, no squares kept
        return total, None

    def backward(self, k, g, inputs, out, saved, needs):
        return tuple(k.xp.multiply(a, 2 * g, out=k.empty(a.shape)) if need else None
                     for a, need in zip(inputs, needs))

    def examples(self):
        return [("arrays", lambda rng: [rng.standard_normal((3, 2)), rng.standard_normal(4)], {}),
                ("one", lambda rng: [rng.standard_normal(5)], {})]


class AdamW(Adam):
    """Adam, then param ·= 1 − learning_rate·weight_decay for parameters no ``no_decay`` glob matches; with
    ``clip_norm`` > 0 the gradients are first scaled by min(1, clip_norm / (‖g‖ + 1e-6)), ‖g‖ over all of them.

    The step publishes ``gradient_norm`` (before clipping) beside the learning rate, for hooks to read.
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
                 no_decay=("*.biases", "*.gamma", "*.beta"), clip_norm=0.0, *, freeze=()):
        super().__init__(learning_rate, beta1, beta2, eps, weight_decay=weight_decay, freeze=freeze)
        self.no_decay = [no_decay] if isinstance(no_decay, str) else list(no_decay)
        self.clip_norm = clip_norm

    def decays(self, param_id: str) -> bool:
        """Whether the decay applies to ``param_id``: no ``no_decay`` glob matches it."""
        return not any(fnmatch.fnmatchcase(param_id, pattern) for pattern in self.no_decay)

    def step(self, handler, params, grads):
        ids = self.trainable(params)
        norm = None
        if self.clip_norm:  # one read of the device for the norm, not one per parameter
            clipped = [grads[i] for i in ids if i in grads]
            norm = math.sqrt(float(handler.op("squared_norm", *clipped))) if clipped else 0.0
            scale = self.clip_norm / (norm + 1e-6)
            if scale < 1.0:
                grads = {i: g * scale for i, g in grads.items()}
        decay = self.learning_rate * self.weight_decay
        if decay:
            for param_id in ids:
                if self.decays(param_id):  # param ·= 1 − decay, in place
                    handler.add_(params[param_id], params[param_id], -decay)
        super().step(handler, params, grads)
        if norm is not None:
            self.published["gradient_norm"] = norm

    def update(self, handler, param, grad, memory, step):
        """Adam's fused rule, without its coupled L2 (the decay was applied in :meth:`step`)."""
        handler.optimiser_update(self.rule, param, grad, memory, weight_decay=0.0, **self.arguments(step))

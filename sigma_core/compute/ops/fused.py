"""The core's fused ops: a dense layer, softmax cross-entropy and dropout, each one kernel forward and one back.

Backends override these kernels first: a training step spends most of its time in them.
"""

import numpy

from sigma_core.errors import ShapeError, SigmaError
from sigma_core.compute.kernels import ACTIVATIONS
from sigma_core.compute.ops.base import KernelOp

normal = KernelOp.normal


class Dense(KernelOp):
    """``activation(x @ weights + bias)``, fused; ``bias`` is an optional third input."""

    def check(self, inputs, params):
        activation = params.get("activation", "none")
        if activation not in ACTIVATIONS:
            raise SigmaError(f"dense: {activation!r} is not a built-in activation ({', '.join(ACTIVATIONS)})")

    def forward(self, k, x, weights, bias=None, *, activation="none"):
        return k.dense(x, weights, bias, activation), None

    def backward(self, k, g, inputs, out, saved, needs, *, activation="none"):
        x, weights = inputs[0], inputs[1]
        gz, gb = k.activation_backward_sum(activation, g, out, len(inputs) == 3 and needs[2])
        gx = k.matmul(gz, k.transpose(weights)) if needs[0] else None
        gw = k.matmul(k.transpose(x), gz) if needs[1] else None
        return (gx, gw) if len(inputs) == 2 else (gx, gw, gb)

    def examples(self):
        inputs = {"bias": (normal(3, 4), normal(4, 5), normal(5)), "nobias": (normal(3, 4), normal(4, 5))}
        return [self.example(f"{activation}-{bias}", *makers, activation=activation)
                for activation in ACTIVATIONS for bias, makers in inputs.items()]


class SoftmaxCrossEntropy(KernelOp):
    """Mean cross-entropy of row-wise softmax(logits), numerically stable, against class probabilities of the
    logits' shape (one-hot, soft, or masked rows that sum to less than 1) or integer class labels, one per row."""

    constants = (1,)

    def check(self, inputs, params):
        logits, targets = inputs
        if targets.dtype.kind not in "iu" and targets.shape != logits.shape:
            raise ShapeError(f"softmax_cross_entropy: logits shape {logits.shape} and targets shape "
                             f"{targets.shape} differ")

    def forward(self, k, logits, targets):
        return k.softmax_cross_entropy(logits, targets)  # (cost, probabilities): the backward pass needs them

    def backward(self, k, g, inputs, out, saved, needs):
        return k.softmax_cross_entropy_backward(g, saved, inputs[1]), None

    def examples(self):
        targets = {"one-hot": numpy.eye(4)[[0, 3, 1]], "indices": numpy.array([0, 3, 1]),
                   "soft": numpy.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]),
                   "masked-multi-hot": numpy.array([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.5, 0.5, 0.5, 0.0]])}
        return [self.example(id, normal(3, 4), t) for id, t in targets.items()]


class Dropout(KernelOp):
    """Inverted dropout (training only): zero with probability ``p``, rescale by 1/(1-p)."""

    draws = True

    def check(self, inputs, params):
        if not 0.0 <= params["p"] < 1.0:
            raise SigmaError(f"dropout: probability must be in [0, 1), got {params['p']}")

    def forward(self, k, x, *, p):
        return k.dropout(x, p)  # (output, mask)

    def backward(self, k, g, inputs, out, saved, needs, *, p):
        return (k.multiply(g, saved),)

    def examples(self):
        return [self.example("dropout", normal(4, 5), p=0.3)]

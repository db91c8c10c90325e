"""The ``one_hot`` layer: integer indices in, one-hot rows out, made on the handler per batch.

A dataset of character indices is as small as its text; only the batch in
flight is ever one-hot (batch × time × classes), and only on the handler.
"""

from __future__ import annotations

import numpy

from sigma_core import Layer, ShapeError


class OneHot(Layer):
    """(batch, *shape) indices in 0..classes-1 become (batch, *shape, classes) rows of the handler's dtype.

    Indices arrive as integers from the ``chars`` extractor, or as whole-number
    floats from ``Network.predict``; the layer has no parameters and no gradient.
    """

    def __init__(self, name, input_shapes, *, classes):
        super().__init__(name, input_shapes)
        self.classes = int(classes)
        self.output_shape = (*self.input_shape, self.classes)

    def forward(self, handler, inputs, params, context):
        indices = handler.to_numpy(inputs[0])
        if len(indices) and (indices.min() < 0 or indices.max() >= self.classes or not numpy.all(indices % 1 == 0)):
            bad = indices[(indices < 0) | (indices >= self.classes) | (indices % 1 != 0)].flat[0]
            raise ShapeError(f"layer {self.name!r}: index {bad} is not a whole number in 0..{self.classes - 1}; "
                             f"the vocabulary has more symbols than classes = {self.classes}")
        eye = handler.asarray(numpy.eye(self.classes))
        return handler.getitem(eye, handler.adopt(indices.astype(numpy.intp, copy=False)))

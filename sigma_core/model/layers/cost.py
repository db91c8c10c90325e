"""Cost layers. Each returns a scalar; a network's cost is Σ importance × cost."""

from sigma_core.errors import ArchitectureError, ShapeError
from sigma_core.model.layers.base import Layer


class CostLayer(Layer):
    """Compares its input (predictions) with the external ``targets`` array."""

    is_cost = True

    def __init__(self, name, input_shapes, *, importance=1.0, targets="targets"):
        super().__init__(name, input_shapes)
        self.importance = float(importance)
        self.targets_external = targets
        self.output_shape = ()

    def targets(self, handler, predictions, context):
        """The external targets; (batch,) labels of a binary classifier take the shape of its (batch, 1) outputs."""
        try:
            targets = context.externals[self.targets_external]
        except KeyError:
            raise ArchitectureError(f"cost layer {self.name!r}: no external targets {self.targets_external!r} "
                                    "were provided") from None
        if predictions.shape[-1] == 1 and targets.shape == predictions.shape[:-1]:
            targets = handler.reshape(targets, predictions.shape)
        return targets

    @staticmethod
    def rows(handler, x):
        """Flatten all axes but the last: (batch, [time,] classes) -> (rows, classes)."""
        return x if x.ndim == 2 else handler.reshape(x, (-1, x.shape[-1]))


class SoftmaxCrossEntropy(CostLayer):
    """Mean cross-entropy of softmax(predictions), fused and numerically stable, against one-hot or
    probability rows or integer class labels."""

    def forward(self, handler, inputs, params, context):
        targets = self.targets(handler, inputs[0], context)
        logits = self.rows(handler, inputs[0])
        if targets.is_integer:  # class labels, one per row
            targets = handler.reshape(targets, (-1,)) if targets.ndim != 1 else targets
            if targets.shape[0] != logits.shape[0]:
                raise ShapeError(f"cost layer {self.name!r}: {targets.shape[0]} labels for "
                                 f"{logits.shape[0]} prediction rows")
        else:
            targets = self.rows(handler, targets)
        try:
            return handler.softmax_cross_entropy(logits, targets)
        except ShapeError as error:
            raise ShapeError(f"cost layer {self.name!r}: {error}") from None


class SquaredDifference(CostLayer):
    """Σ (predictions − targets)² over features, averaged over rows (Sigma summed over the batch too;
    the mean keeps the learning rate independent of the batch size)."""

    def forward(self, handler, inputs, params, context):
        targets = self.rows(handler, self.targets(handler, inputs[0], context))
        predictions = self.rows(handler, inputs[0])
        if targets.shape != predictions.shape:
            raise ShapeError(f"cost layer {self.name!r}: predictions shape {predictions.shape} and targets shape "
                             f"{targets.shape} differ")
        diff = predictions - targets
        return (diff * diff).sum() * (1.0 / predictions.shape[0])

"""What ``sigma predict`` prints: class probabilities from a network's raw predictions."""

import numpy


def class_probabilities(network, predictions: numpy.ndarray) -> numpy.ndarray:
    """Per-class probabilities: the softmax of a softmax cross-entropy network's logits; other outputs as they are."""
    if not any(type(layer).__name__ == "SoftmaxCrossEntropy" for layer in network.layers.values()):
        return predictions
    shifted = numpy.exp(predictions - predictions.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)

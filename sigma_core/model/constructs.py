"""Python shorthands for the built-in layers: ``Input(28, 28) + Dense(100, "relu") + Dense(10) + SoftmaxCE()``.

Each takes the layer's arguments (its defaults are the layer's own) and ``name``, the first ones also by position.
Plugin layers use :class:`~sigma_core.model.architecture.Construct` directly:
``Construct("maxout", size=64, pieces=2)``.
"""

from sigma_core.model.architecture import Construct


def Input(*shape, name=None, external="inputs"):
    return Construct("input", name, shape=shape, external=external)


def _shorthand(layer_type: str, *positional: str):
    def shorthand(*values, name=None, **params):
        if len(values) > len(positional):
            raise TypeError(f"{layer_type} takes {len(positional)} positional argument(s) "
                            f"({', '.join(positional) or 'none'}), got {len(values)}")
        return Construct(layer_type, name, **dict(zip(positional, values)), **params)

    return shorthand


Output = _shorthand("output")
Dense = _shorthand("dense", "size", "activation")
Elementwise = _shorthand("elementwise", "activation")
Dropout = _shorthand("dropout", "p")
Concatenate = _shorthand("concatenate")
Add = _shorthand("add")
SoftmaxCE = _shorthand("softmax_ce", "importance")
SquaredDifference = _shorthand("squared_difference", "importance")

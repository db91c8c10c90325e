"""The transformer's layers over (batch, T, width) sequences: ``embedding``, ``positional``, ``attention``,
``token_norm`` and ``tied_logits``.

Each checks its arguments and input shape when the network is built (one line
naming the layer), and runs handler ops or one op of :mod:`sigmann_attention.ops`.
A residual block is these layers joined by the core's ``add`` merge
(:func:`sigmann_attention.TransformerBlock` writes one out).
"""

from __future__ import annotations

from sigma_core import ArchitectureError, Constant, Gaussian, Layer, ShapeError

#: GPT-2's initial weights: N(0, 0.02²), small enough that a deep stack starts near the identity.
GPT_INIT = Gaussian(std=0.02)


def _sequence(layer):
    """The layer's (T, width) input shape, or an error naming the layer."""
    if len(layer.input_shape) != 2:
        raise ArchitectureError(f"layer {layer.name!r}: expects (batch, T, width) input, got per-record shape "
                                f"{layer.input_shape}; put an embedding layer before it")
    return layer.input_shape


class Embedding(Layer):
    """Token ids (batch, T) -> vectors (batch, T, ``size``): row ``id`` of ``weights`` (``vocabulary``, ``size``).

    Ids outside 0..vocabulary−1 stop the run with one line naming the layer (the ``chars`` extractor numbers a
    text's characters, so ``vocabulary`` must be at least the text's number of distinct characters).
    """

    argument_rules = {"vocabulary": "int >= 1", "size": "int >= 1"}

    def __init__(self, name, input_shapes, *, vocabulary, size):
        super().__init__(name, input_shapes)
        self.vocabulary, self.size = int(vocabulary), int(size)
        self.output_shape = (*self.input_shape, self.size)
        self.parameter_shapes = {"weights": (self.vocabulary, self.size)}

    def default_initialisers(self):
        return {"weights": GPT_INIT}

    def forward(self, handler, inputs, params, context):
        try:
            return handler.op("embedding", inputs[0], params["weights"])
        except ShapeError as error:  # an id out of range: the run file's vocabulary is too small
            raise ShapeError(f"layer {self.name!r}: {error}; raise vocabulary = {self.vocabulary}") from None


class Positional(Layer):
    """Adds a learnt vector per position: x[:, t] + ``weights``[t], from a table of ``context`` positions.

    Sequences may be shorter than the table (``sigma sample`` runs shorter windows first), never longer.
    """

    argument_rules = {"context": "int >= 1"}

    def __init__(self, name, input_shapes, *, context):
        super().__init__(name, input_shapes)
        steps, width = _sequence(self)
        self.context = int(context)
        if steps > self.context:
            raise ArchitectureError(f"layer {name!r}: sequences of {steps} positions are longer than its table of "
                                    f"context = {self.context}")
        self.parameter_shapes = {"weights": (self.context, width)}

    def default_initialisers(self):
        return {"weights": GPT_INIT}

    def forward(self, handler, inputs, params, context):
        x = inputs[0]
        return x + handler.getitem(params["weights"], slice(0, x.shape[1]))


class Attention(Layer):
    """Multi-head self-attention: ``heads`` heads over the width, causal unless ``causal = false``.

    qkv = x·``qkv_weights`` + ``qkv_biases`` (width, 3·width), the ``attention`` op, then
    ·``out_weights`` + ``out_biases`` (width, width). A second input, (batch, T) of 1 for tokens and 0 for padding,
    hides the padding keys. ``dropout`` applies to the attention weights in training.
    """

    arity = None
    argument_rules = {"heads": "int >= 1", "dropout": "number in [0, 1)", "causal": "bool"}

    def __init__(self, name, input_shapes, *, heads, dropout=0.0, causal=True):
        super().__init__(name, input_shapes)
        steps, width = _sequence(self)
        self.heads, self.dropout, self.causal = int(heads), float(dropout), bool(causal)
        if width % self.heads:
            raise ArchitectureError(f"layer {name!r}: width {width} is not divisible by heads = {self.heads}")
        if len(self.input_shapes) > 2 or self.input_shapes[1:] not in ([], [(steps,)]):
            raise ArchitectureError(f"layer {name!r}: takes a sequence and optionally a padding mask of shape "
                                    f"({steps},); got inputs of shapes {self.input_shapes}")
        self.parameter_shapes = {"qkv_weights": (width, 3 * width), "qkv_biases": (3 * width,),
                                 "out_weights": (width, width), "out_biases": (width,)}

    def default_initialisers(self):
        return {"qkv_weights": GPT_INIT, "out_weights": GPT_INIT, "qkv_biases": Constant(0.0),
                "out_biases": Constant(0.0)}

    def forward(self, handler, inputs, params, context):
        x = inputs[0]
        batch, steps, width = x.shape
        rows = handler.reshape(x, (-1, width))
        qkv = handler.reshape(handler.dense(rows, params["qkv_weights"], params["qkv_biases"]), (batch, steps, -1))
        mixed = handler.op("attention", qkv, *inputs[1:], heads=self.heads, causal=self.causal,
                           dropout=self.dropout, training=context.training)
        out = handler.dense(handler.reshape(mixed, (-1, width)), params["out_weights"], params["out_biases"])
        return handler.reshape(out, x.shape)


class TokenNorm(Layer):
    """Layer normalisation of each position's features (the last axis), as PyTorch's ``LayerNorm(width)``:
    ``gamma``·(x − μ)/√(σ² + eps) + ``beta``, both (width,).

    It runs sigmann-vision's ``layer_norm`` op (the one implementation); vision's ``layer_norm`` layer
    normalises a whole record instead, which for a sequence would mix its positions.
    """

    argument_rules = {"eps": "number > 0"}

    def __init__(self, name, input_shapes, *, eps=1e-5):
        super().__init__(name, input_shapes)
        if not self.input_shape:
            raise ArchitectureError(f"layer {name!r}: needs records with a feature axis, got scalars")
        self.eps = float(eps)
        width = self.input_shape[-1]
        self.parameter_shapes = {"gamma": (width,), "beta": (width,)}

    def default_initialisers(self):
        return {"gamma": Constant(1.0), "beta": Constant(0.0)}

    def forward(self, handler, inputs, params, context):
        x = inputs[0]
        rows = handler.reshape(x, (-1, x.shape[-1]))
        return handler.reshape(handler.op("layer_norm", rows, params["gamma"], params["beta"], eps=self.eps), x.shape)


class TiedLogits(Layer):
    """Logits over the vocabulary through the embedding's own table: x·``weights``ᵀ, ``weights`` being the layer
    ``embedding``'s (vocabulary, width) table itself (weight tying, as nanoGPT's ``lm_head.weight = wte.weight``).

    The network makes, trains and saves that table once, under the embedding's id, and adds up the gradients of
    its two uses (``Layer.shared_parameters``). No biases, as nanoGPT's output layer.
    """

    argument_rules = {"vocabulary": "int >= 1", "embedding": "str"}

    def __init__(self, name, input_shapes, *, vocabulary, embedding="embedding"):
        super().__init__(name, input_shapes)
        steps, width = _sequence(self)
        self.vocabulary = int(vocabulary)
        self.output_shape = (steps, self.vocabulary)
        self.parameter_shapes = {"weights": (self.vocabulary, width)}
        self.shared_parameters = {"weights": f"{embedding}.weights"}

    def forward(self, handler, inputs, params, context):
        x = inputs[0]
        rows = handler.reshape(x, (-1, x.shape[-1]))
        logits = handler.matmul(rows, handler.transpose(params["weights"]))
        return handler.reshape(logits, (*x.shape[:-1], self.vocabulary))

"""sigmann-attention: transformers for Sigma, built on the ops seam alone.

The layers (:mod:`sigmann_attention.layers`: ``embedding``, ``positional``,
``attention``, ``token_norm``) run the ops of :mod:`sigmann_attention.ops`
(``embedding``, ``gelu``, ``attention``: forward rules and VJPs over any
handler's array module), which this distribution registers through
``register_ops`` together with the ``cpu`` handler's numba kernels: tiled
attention (:mod:`sigmann_attention.cpu`), exact GELU
(:mod:`sigmann_attention.cpu_gelu`) and the embedding's scatter
(:mod:`sigmann_attention.cpu_embedding`). ``gelu`` and ``gelu_tanh`` are
activations for dense layers; ``adamw`` (:mod:`sigmann_attention.adamw`) and the
``warm_up_cosine`` schedule (:mod:`sigmann_attention.schedule`) train them.
Registering imports neither NumPy nor numba. :func:`TransformerBlock` and
:func:`GPT` write a network out of these layers and the core's ``add`` merge.
"""

from sigma_core import hookimpl

#: Layer type -> (implementation in sigmann_attention.layers, description).
LAYERS = {
    "embedding": ("Embedding", "token ids -> vectors, a row of the table per id"),
    "positional": ("Positional", "adds a learnt vector per position"),
    "attention": ("Attention", "multi-head self-attention, causal, with an optional padding mask"),
    "token_norm": ("TokenNorm", "layer normalisation of each position's features"),
    "tied_logits": ("TiedLogits", "logits through the embedding's table, transposed (weight tying)"),
}


@hookimpl
def register_layers(register):
    for name, (implementation, description) in LAYERS.items():
        register(name, f"sigmann_attention.layers:{implementation}", description=description)


@hookimpl
def register_ops(register):
    register("embedding", "sigmann_attention.ops:Embedding",
             kernels={"cpu": "sigmann_attention.cpu_embedding:ScatterEmbedding"},
             description="rows of a table by id; scatter gradient (one numba loop on the cpu handler)")
    register("gelu", "sigmann_attention.ops:GELU", kernels={"cpu": "sigmann_attention.cpu_gelu:FusedGELU"},
             description="x·Φ(x), exact or tanh-approximated; one numba loop each way on the cpu handler")
    register("squared_norm", "sigmann_attention.adamw:SquaredNorm",
             description="Σ x² over every input: a global norm in one op (adamw's clip)")
    register("attention", "sigmann_attention.ops:Attention", kernels={"cpu": "sigmann_attention.cpu:FlashAttention"},
             description="scaled dot-product attention of every head; tiled numba loops on the cpu handler")


def gelu(handler, x):
    """GELU, exact (x·Φ(x) with erf), PyTorch's default."""
    return handler.op("gelu", x, approximate="none")


def gelu_tanh(handler, x):
    """GELU's tanh approximation (GPT-2's)."""
    return handler.op("gelu", x, approximate="tanh")


@hookimpl
def register_activations(register):
    register("gelu", gelu, description="x·Φ(x), exact (erf)")
    register("gelu_tanh", gelu_tanh, description="GELU, tanh approximation (GPT-2)")


@hookimpl
def register_exporters(register):
    """sigmann-onnx's table (sigma export --format onnx): the layers, and GELU for the dense layers using it."""
    for name in LAYERS:
        register(f"onnx/{name}", f"sigmann_attention.onnx:{name}", description=f"a {name} layer in ONNX")
    for name in ("gelu", "gelu_tanh"):
        register(f"onnx-activation/{name}", f"sigmann_attention.onnx:{name}", description=f"{name} in ONNX")


@hookimpl
def register_optimisers(register):
    register("adamw", "sigmann_attention.adamw:AdamW",
             description="Adam with decoupled weight decay (excluded by pattern) and global-norm clipping")


@hookimpl
def register_hooks(register):
    register("warm_up_cosine", "sigmann_attention.schedule:WarmUpCosine",
             description="linear learning-rate warm-up, then cosine decay")


def _construct(layer_type, name, **arguments):
    from sigma_core import Construct

    return Construct(layer_type, name, **arguments)


def Embedding(vocabulary, size, name=None):
    """The ``embedding`` layer as a construct."""
    return _construct("embedding", name, vocabulary=vocabulary, size=size)


def Positional(context, name=None):
    """The ``positional`` layer as a construct."""
    return _construct("positional", name, context=context)


def Attention(heads, dropout=0.0, causal=True, name=None):
    """The ``attention`` layer as a construct."""
    return _construct("attention", name, heads=heads, dropout=dropout, causal=causal)


def TokenNorm(eps=1e-5, name=None):
    """The ``token_norm`` layer as a construct."""
    return _construct("token_norm", name, eps=eps)


def TiedLogits(vocabulary, embedding="embedding", name=None):
    """The ``tied_logits`` layer as a construct: the output projection sharing the layer ``embedding``'s table."""
    return _construct("tied_logits", name, vocabulary=vocabulary, embedding=embedding)


def TransformerBlock(source, width, heads, prefix, dropout=0.0):
    """A pre-norm GPT block after the construct ``source``, its layers named ``prefix-*``: x + attention(norm(x)),
    then x + MLP(norm(x)) (width -> 4·width, GELU, -> width). Returns the architecture of the block's constructs;
    its last, the second residual ``add``, feeds what follows."""
    from sigma_core import Add, Architecture, Dense

    norm1 = TokenNorm(name=f"{prefix}-norm1").link(source)
    attention = Attention(heads, dropout, name=f"{prefix}-attention").link(norm1)
    residual1 = Add(name=f"{prefix}-residual1").link(source, attention)
    norm2 = TokenNorm(name=f"{prefix}-norm2").link(residual1)
    up = Dense(4 * width, "gelu", time_distributed=True, name=f"{prefix}-mlp_up").link(norm2)
    down = Dense(width, time_distributed=True, name=f"{prefix}-mlp_down").link(up)
    residual2 = Add(name=f"{prefix}-residual2").link(residual1, down)
    return Architecture([norm1, attention, residual1, norm2, up, down, residual2])


def GPT(vocabulary, context, width, heads, layers, dropout=0.0, tie_weights=False):
    """A character GPT (nanoGPT's layout): ids (context,) -> logits (context, vocabulary) and a softmax
    cross-entropy cost over every position. ``tie_weights``: the logits come through the embedding's table
    (``tied_logits``, no biases, as nanoGPT) instead of a dense layer of their own."""
    from sigma_core import Dense, Input, SoftmaxCE

    architecture = (Input(context) + Embedding(vocabulary, width, name="embedding")
                    + Positional(context, name="positional"))
    for block in range(layers):
        architecture = architecture + TransformerBlock(architecture.constructs[-1], width, heads, f"block{block}",
                                                       dropout)
    logits = (TiedLogits(vocabulary, name="logits") if tie_weights
              else Dense(vocabulary, time_distributed=True, name="logits"))
    return architecture + TokenNorm(name="norm") + logits + SoftmaxCE()

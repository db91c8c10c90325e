"""sigmann-vision: convolution, pooling and normalisation layers for Sigma, built on the ops seam alone.

The layers (:mod:`sigmann_vision.layers`, NCHW records) run the ops of
:mod:`sigmann_vision.ops` (forward rules and VJPs over any handler's array
module: im2col + GEMM convolution, pooling that keeps the winning tap, batch
and layer normalisation), which this distribution registers through
``register_ops`` together with the ``cpu`` handler's numba kernels
(:mod:`sigmann_vision.cpu`). Batch norm's running statistics are layer state
(``Layer.state_shapes``): checkpointed, never trained. Registering imports
neither NumPy nor numba. The functions below are the Python shorthands:
``Input(28, 28) + Reshape([1, 28, 28]) + Conv2D(32, 3, padding="same", activation="relu") + MaxPool2D(2)``.
"""

from sigma_core import hookimpl

#: Layer type -> (implementation in sigmann_vision.layers, description).
LAYERS = {
    "conv2d": ("Conv2D", "2-D convolution over (C, H, W) records: stride, padding, dilation, groups"),
    "max_pool2d": ("MaxPool2D", "the largest value of each window"),
    "avg_pool2d": ("AvgPool2D", "the mean of each window"),
    "global_avg_pool": ("GlobalAvgPool", "the mean of each channel: (C, H, W) -> (C,)"),
    "batch_norm": ("BatchNorm", "batch normalisation per channel, with running statistics"),
    "layer_norm": ("LayerNorm", "each record normalised over its values"),
    "reshape": ("Reshape", "records of another shape with the same values"),
    "flatten": ("Flatten", "records as one axis of features"),
    "permute": ("Permute", "records with their axes reordered: (H, W, C) images to (C, H, W)"),
}

#: Op -> (implementation in sigmann_vision.ops, the cpu handler's kernel in sigmann_vision.cpu or None, description).
OPS = {
    "conv2d": ("Conv2D", "Conv2D", "2-D convolution (im2col + GEMM), NCHW"),
    "max_pool2d": ("MaxPool2D", "MaxPool2D", "max pooling, keeping the winning tap for the backward pass"),
    "avg_pool2d": ("AvgPool2D", None, "average pooling, padding counted"),
    "batch_norm": ("BatchNorm", "BatchNorm", "batch normalisation; updates the running statistics in training"),
    "layer_norm": ("LayerNorm", "LayerNorm", "normalisation of each row"),
}


@hookimpl
def register_layers(register):
    for name, (implementation, description) in LAYERS.items():
        register(name, f"sigmann_vision.layers:{implementation}", description=description)


@hookimpl
def register_ops(register):
    for name, (implementation, cpu, description) in OPS.items():
        kernels = {"cpu": f"sigmann_vision.cpu:{cpu}"} if cpu else {}
        register(name, f"sigmann_vision.ops:{implementation}", kernels=kernels, description=description)


@hookimpl
def register_exporters(register):
    for name in LAYERS:  # sigmann-onnx's table: sigma export --format onnx
        register(f"onnx/{name}", f"sigmann_vision.onnx:{name}", description=f"a {name} layer in ONNX")


def _construct(layer_type, name, **arguments):
    from sigma_core import Construct

    return Construct(layer_type, name, **arguments)


def Conv2D(channels, kernel=3, stride=1, padding="valid", dilation=1, groups=1, bias=True, activation="none",
           name=None):
    """The ``conv2d`` layer as a construct."""
    return _construct("conv2d", name, channels=channels, kernel=kernel, stride=stride, padding=padding,
                      dilation=dilation, groups=groups, bias=bias, activation=activation)


def MaxPool2D(kernel=2, stride=None, padding=0, name=None):
    """The ``max_pool2d`` layer as a construct."""
    return _construct("max_pool2d", name, kernel=kernel, stride=stride, padding=padding)


def AvgPool2D(kernel=2, stride=None, padding=0, name=None):
    """The ``avg_pool2d`` layer as a construct."""
    return _construct("avg_pool2d", name, kernel=kernel, stride=stride, padding=padding)


def GlobalAvgPool(name=None):
    """The ``global_avg_pool`` layer as a construct."""
    return _construct("global_avg_pool", name)


def BatchNorm(momentum=0.1, eps=1e-5, activation="none", name=None):
    """The ``batch_norm`` layer as a construct."""
    return _construct("batch_norm", name, momentum=momentum, eps=eps, activation=activation)


def LayerNorm(eps=1e-5, name=None):
    """The ``layer_norm`` layer as a construct."""
    return _construct("layer_norm", name, eps=eps)


def Reshape(shape, name=None):
    """The ``reshape`` layer as a construct."""
    return _construct("reshape", name, shape=list(shape) if not isinstance(shape, int) else shape)


def Permute(axes, name=None):
    """The ``permute`` layer as a construct."""
    return _construct("permute", name, axes=list(axes))


def Flatten(name=None):
    """The ``flatten`` layer as a construct."""
    return _construct("flatten", name)

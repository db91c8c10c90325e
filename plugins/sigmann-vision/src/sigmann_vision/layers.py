"""The vision layers over NCHW records: ``conv2d``, ``max_pool2d``, ``avg_pool2d``, ``global_avg_pool``,
``batch_norm``, ``layer_norm``, ``reshape``, ``flatten`` and ``permute``.

Each checks its arguments and input shape when the network is built (one
line naming the layer and the key), computes its geometry once, and runs one
op of :mod:`sigmann_vision.ops` per forward pass. Records are (channels,
height, width) without the batch axis; ``reshape`` makes them from flat or
(height, width) data (``shape = [1, 28, 28]`` for MNIST), ``permute`` from (height, width,
channels) colour images (``axes = [2, 0, 1]``).
"""

from __future__ import annotations

import math

from sigma_core import ArchitectureError, Constant, Custom, Layer, resolve_activation

from .geometry import pair, resolve_padding, window_output


def _image(layer, what="(channels, height, width)"):
    """The layer's (C, H, W) input shape, or an error naming the layer that says how to get one."""
    if len(layer.input_shape) != 3:
        raise ArchitectureError(
            f"layer {layer.name!r}: expects {what} records, got per-record shape {layer.input_shape}; put a "
            f"reshape layer before it (type = \"reshape\", shape = [channels, height, width])")
    return layer.input_shape


def _he_normal(shape, rng):
    """N(0, 2 / fan_in) with fan_in = C/groups · KH · KW (the weights are (O, C/groups, KH, KW), not channels-last)."""
    return rng.standard_normal(shape) * math.sqrt(2.0 / math.prod(shape[1:]))


class Conv2D(Layer):
    """activation(conv2d(x, weights) + biases): ``channels`` output channels, ``kernel`` (one int or [h, w]),
    ``stride``, ``padding`` ("valid", "same", a number, [h, w] or [top, bottom, left, right]), ``dilation``,
    ``groups`` (input and output channels split into that many independent convolutions).

    Parameters: ``weights`` (channels, in_channels/groups, kh, kw), as PyTorch and ONNX lay them out, and
    ``biases`` (channels,); the weights start He-normal over each output's fan-in.
    """

    argument_rules = {"channels": "int >= 1", "kernel": "shape", "stride": "shape", "dilation": "shape",
                      "groups": "int >= 1", "padding": "any"}

    def __init__(self, name, input_shapes, *, channels, kernel=3, stride=1, padding="valid", dilation=1, groups=1,
                 bias=True, activation="none"):
        super().__init__(name, input_shapes)
        in_channels, height, width = _image(self)
        self.kernel, self.stride = pair(kernel, name, "kernel"), pair(stride, name, "stride")
        self.dilation, self.groups = pair(dilation, name, "dilation"), int(groups)
        for which, count in (("input", in_channels), ("output", int(channels))):
            if count % self.groups:
                raise ArchitectureError(f"layer {name!r}: groups = {groups} does not divide the {count} {which} "
                                        f"channels")
        self.padding = resolve_padding(padding, (height, width), self.kernel, self.stride, self.dilation, name)
        out_hw = window_output(name, (height, width), self.kernel, self.stride, self.dilation, self.padding)
        self.activation = resolve_activation(activation, name)
        self.output_shape = (int(channels), *out_hw)
        self.parameter_shapes = {"weights": (int(channels), in_channels // self.groups, *self.kernel)}
        if bias:
            self.parameter_shapes["biases"] = (int(channels),)

    def default_initialisers(self):
        return {"weights": Custom(_he_normal), "biases": Constant(0.0)}

    def forward(self, handler, inputs, params, context):
        arrays = [inputs[0], params["weights"]] + ([params["biases"]] if "biases" in self.parameter_shapes else [])
        y = handler.op("conv2d", *arrays, stride=self.stride, padding=self.padding, dilation=self.dilation,
                       groups=self.groups)
        return self.activation(handler, y)


class Pool2D(Layer):
    """What the pooling layers share: ``kernel``, ``stride`` (default: the kernel) and ``padding``."""

    op = ""
    argument_rules = {"kernel": "shape", "stride": "shape or null", "padding": "any"}

    def __init__(self, name, input_shapes, *, kernel=2, stride=None, padding=0):
        super().__init__(name, input_shapes)
        channels, height, width = _image(self)
        self.kernel = pair(kernel, name, "kernel")
        self.stride = self.kernel if stride is None else pair(stride, name, "stride")
        self.padding = resolve_padding(padding, (height, width), self.kernel, self.stride, (1, 1), name)
        if max(self.padding[:2]) > self.kernel[0] // 2 or max(self.padding[2:]) > self.kernel[1] // 2:
            raise ArchitectureError(f"layer {name!r}: padding {list(self.padding)} is more than half the kernel "
                                    f"{list(self.kernel)}")
        self.output_shape = (channels, *window_output(name, (height, width), self.kernel, self.stride, (1, 1),
                                                      self.padding))

    def forward(self, handler, inputs, params, context):
        return handler.op(self.op, inputs[0], kernel=self.kernel, stride=self.stride, padding=self.padding)


class MaxPool2D(Pool2D):
    """The largest value of each window."""

    op = "max_pool2d"


class AvgPool2D(Pool2D):
    """The mean of each window; padding counts as zeros (PyTorch's default)."""

    op = "avg_pool2d"


class GlobalAvgPool(Layer):
    """The mean of each channel over its height and width: (C, H, W) records become (C,)."""

    def __init__(self, name, input_shapes):
        super().__init__(name, input_shapes)
        self.output_shape = _image(self)[:1]

    def forward(self, handler, inputs, params, context):
        return handler.mean(inputs[0], axis=(2, 3))


class BatchNorm(Layer):
    """Batch normalisation per channel (axis 1 of any record shape: (C, H, W) after a convolution, (C,) after a
    dense layer): ``gamma``·(x − μ)/√(σ² + eps) + ``beta``.

    In training μ and σ² are the batch's and the running statistics move towards them by ``momentum``
    (PyTorch's convention: the weight of the new batch); in evaluation and prediction the running statistics
    are used. They are the layer's state (``running_mean``, ``running_var``), not parameters: saved and restored
    with the parameters, never trained. ``activation`` applies after the normalisation (conv → batch norm → ReLU); a ReLU is fused into the
    ``batch_norm`` op's own pass.
    """

    argument_rules = {"momentum": "number in [0, 1]", "eps": "number > 0"}

    def __init__(self, name, input_shapes, *, momentum=0.1, eps=1e-5, activation="none"):
        super().__init__(name, input_shapes)
        self.activation = resolve_activation(activation, name)
        self.fused = "relu" if activation == "relu" else "none"  # the op rectifies in its own pass
        if not self.input_shape:
            raise ArchitectureError(f"layer {name!r}: batch norm needs records with a channel axis, got scalars")
        channels = self.input_shape[0]
        self.momentum, self.eps = float(momentum), float(eps)
        self.parameter_shapes = {"gamma": (channels,), "beta": (channels,)}
        self.state_shapes = {"running_mean": (channels,), "running_var": (channels,)}

    def default_initialisers(self):
        return {"gamma": Constant(1.0), "beta": Constant(0.0)}

    def initial_state(self):
        return {"running_mean": 0.0, "running_var": 1.0}

    def forward(self, handler, inputs, params, context):
        y = handler.op("batch_norm", inputs[0], params["gamma"], params["beta"], params["running_mean"],
                       params["running_var"], training=context.training, momentum=self.momentum, eps=self.eps,
                       activation=self.fused)
        return y if self.fused == "relu" else self.activation(handler, y)


class LayerNorm(Layer):
    """Each record normalised over all its values, then scaled by ``gamma`` and shifted by ``beta`` (both of the
    record's shape, as PyTorch's LayerNorm over the whole record); the same in training and evaluation."""

    argument_rules = {"eps": "number > 0"}

    def __init__(self, name, input_shapes, *, eps=1e-5):
        super().__init__(name, input_shapes)
        self.eps = float(eps)
        self.parameter_shapes = {"gamma": self.input_shape, "beta": self.input_shape}

    def default_initialisers(self):
        return {"gamma": Constant(1.0), "beta": Constant(0.0)}

    def forward(self, handler, inputs, params, context):
        x = inputs[0]
        features = math.prod(self.input_shape)
        gamma, beta = (handler.reshape(params[p], (features,)) for p in ("gamma", "beta"))
        y = handler.op("layer_norm", handler.reshape(x, (-1, features)), gamma, beta, eps=self.eps)
        return handler.reshape(y, x.shape)


class Reshape(Layer):
    """Records of another shape with the same values, in order: ``shape = [1, 28, 28]`` makes MNIST's (28, 28)
    or (784,) records single-channel images."""

    argument_rules = {"shape": "shape"}

    def __init__(self, name, input_shapes, *, shape):
        super().__init__(name, input_shapes)
        self.output_shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
        if math.prod(self.output_shape) != math.prod(self.input_shape):
            raise ArchitectureError(f"layer {name!r}: shape {list(self.output_shape)} holds "
                                    f"{math.prod(self.output_shape)} values, the input records "
                                    f"{list(self.input_shape)} {math.prod(self.input_shape)}")

    def forward(self, handler, inputs, params, context):
        return handler.reshape(inputs[0], (-1, *self.output_shape))


class Flatten(Reshape):
    """Records as one axis of features: (C, H, W) becomes (C·H·W,)."""

    def __init__(self, name, input_shapes):
        super().__init__(name, input_shapes, shape=math.prod(input_shapes[0]) if input_shapes else 1)


class Permute(Layer):
    """Records with their axes reordered: ``axes = [2, 0, 1]`` makes (height, width, channels) images, as
    sigmann-images' ``image_folder`` gives colour ones, (channels, height, width). A copy, so the layers after
    it read a contiguous array."""

    argument_rules = {"axes": ["int >= 0"]}

    def __init__(self, name, input_shapes, *, axes):
        super().__init__(name, input_shapes)
        if sorted(axes) != list(range(len(self.input_shape))):
            raise ArchitectureError(f"layer {name!r}: axes {list(axes)} are not an order of the record's "
                                    f"{len(self.input_shape)} axes (0 to {len(self.input_shape) - 1})")
        self.axes = tuple(int(a) for a in axes)
        self.output_shape = tuple(self.input_shape[a] for a in self.axes)

    def forward(self, handler, inputs, params, context):
        return handler.copy(handler.transpose(inputs[0], (0, *(a + 1 for a in self.axes))))

"""Window arithmetic shared by the layers, the ops and the ONNX exporters: one place that says what "same" means.

A 2-D window op (convolution, pooling) slides a ``kernel`` (kh, kw), spread by
``dilation`` (dh, dw), over an input padded by ``padding`` (top, bottom, left,
right), ``stride`` (sh, sw) apart. Output sizes are floored, as in PyTorch and
ONNX (no ceil mode).
"""

from __future__ import annotations

from sigma_core import ArchitectureError


def pair(value, name: str, key: str) -> tuple[int, int]:
    """An int or a [h, w] pair as (h, w); the layer's argument rule has checked the values are positive ints."""
    if isinstance(value, int):
        return value, value
    if len(value) != 2:
        raise ArchitectureError(f"layer {name!r}: {key} must be one integer or [height, width], got {list(value)}")
    return int(value[0]), int(value[1])


def span(kernel: int, dilation: int) -> int:
    """How many input rows (or columns) one window covers."""
    return (kernel - 1) * dilation + 1


def output_size(size: int, kernel: int, stride: int, dilation: int, before: int, after: int) -> int:
    """Windows that fit along one axis of ``size`` padded by ``before`` and ``after`` (0 or less: none fit)."""
    return (size + before + after - span(kernel, dilation)) // stride + 1


def resolve_padding(padding, spatial, kernel, stride, dilation, name: str) -> tuple[int, int, int, int]:
    """A layer's ``padding`` argument as (top, bottom, left, right).

    ``"valid"``: none. ``"same"``: the output is ceil(input / stride) on each axis (the input's size at
    stride 1), with the odd pixel of padding at the bottom and right, as in TensorFlow and ONNX's SAME_UPPER.
    A number pads every side; ``[h, w]`` pads top and bottom by h, left and right by w; four numbers are
    top, bottom, left, right.
    """
    if padding == "valid":
        return 0, 0, 0, 0
    if padding == "same":
        sides = []
        for size, k, s, d in zip(spatial, kernel, stride, dilation):
            total = max((-(-size // s) - 1) * s + span(k, d) - size, 0)
            sides += [total // 2, total - total // 2]
        return tuple(sides)
    values = [padding] if isinstance(padding, int) and not isinstance(padding, bool) else padding
    if (not isinstance(values, (list, tuple)) or len(values) not in (1, 2, 4)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)):
        raise ArchitectureError(f"layer {name!r}: padding must be \"same\", \"valid\", an integer >= 0, [h, w] or "
                                f"[top, bottom, left, right], got {padding!r}")
    if len(values) == 1:
        return (values[0],) * 4
    if len(values) == 2:
        return values[0], values[0], values[1], values[1]
    return tuple(values)


def window_output(name: str, spatial, kernel, stride, dilation, padding) -> tuple[int, int]:
    """(out_h, out_w) of a window layer, or an :class:`ArchitectureError` naming the layer where the kernel does
    not fit the padded input."""
    out = []
    for axis, size, k, s, d, before, after in zip(("height", "width"), spatial, kernel, stride, dilation,
                                                   padding[0::2], padding[1::2]):
        n = output_size(size, k, s, d, before, after)
        if n < 1:
            raise ArchitectureError(f"layer {name!r}: kernel {axis} {k} (dilation {d}, spanning {span(k, d)}) is "
                                    f"larger than the padded input {axis} {size + before + after}")
        out.append(n)
    return tuple(out)

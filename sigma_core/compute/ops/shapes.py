"""The core's shape ops: reshape, transpose, indexing and joining. Their gradients move values, never change them."""

from sigma_core.compute.ops.base import KernelOp

normal = KernelOp.normal

class Reshape(KernelOp):
    """``a``'s elements in ``shape`` (one axis may be -1)."""

    def forward(self, k, x, *, shape):
        return k.reshape(x, shape), None

    def backward(self, k, g, inputs, out, saved, needs, *, shape):
        return (k.reshape(g, inputs[0].shape),)

    def examples(self):
        return [self.example("plain", normal(3, 4), shape=(2, 6)), self.example("infer", normal(2, 3, 2), shape=(-1,))]

class Transpose(KernelOp):
    """``a`` with its axes in the order ``axes`` (None: reversed)."""

    def forward(self, k, x, *, axes=None):
        return k.transpose(x, axes), None

    def backward(self, k, g, inputs, out, saved, needs, *, axes=None):
        if axes is None:
            return (k.transpose(g),)
        return (k.transpose(g, tuple(sorted(range(len(axes)), key=lambda i: axes[i] % len(axes)))),)

    def examples(self):
        return [self.example("default", normal(2, 3, 4)), self.example("axes", normal(2, 3, 4), axes=(1, 0, 2)),
                self.example("negative-axes", normal(2, 3, 4), axes=(-1, 0, 1))]

class Getitem(KernelOp):
    """``a[index]``: NumPy basic and integer-array indexing; repeated rows add up their gradients."""

    def forward(self, k, x, *, index):
        return k.getitem(x, index), None

    def backward(self, k, g, inputs, out, saved, needs, *, index):
        return (k.scatter_add(inputs[0].shape, index, g),)

    def examples(self):
        return [self.example("slice", normal(4, 3), index=slice(1, 3)), self.example("int", normal(3, 4), index=-1),
                self.example("strided", normal(3, 4), index=(slice(None), slice(None, None, 2))),
                self.example("repeated-list", normal(3, 4), index=[0, 2, 0])]

class Concatenate(KernelOp):
    """The inputs joined along an existing ``axis``."""

    def forward(self, k, *xs, axis=0):
        return k.concatenate(xs, axis), None

    def backward(self, k, g, inputs, out, saved, needs, *, axis=0):
        axis %= g.ndim
        grads, start = [], 0
        for x, need in zip(inputs, needs):
            stop = start + x.shape[axis]
            grads.append(k.copy(g[(slice(None),) * axis + (slice(start, stop),)]) if need else None)
            start = stop
        return tuple(grads)

    def examples(self):
        return [self.example("axis0", normal(2, 4), normal(3, 4), axis=0),
                self.example("axis-last", normal(3, 1), normal(3, 2), normal(3, 3), axis=-1)]

class Stack(KernelOp):
    """The inputs (of one shape) joined along a new ``axis``."""

    def forward(self, k, *xs, axis=0):
        return k.stack(xs, axis), None

    def backward(self, k, g, inputs, out, saved, needs, *, axis=0):
        axis %= g.ndim
        return tuple(k.copy(g[(slice(None),) * axis + (i,)]) if need else None for i, need in enumerate(needs))

    def examples(self):
        return [self.example("axis0", normal(3, 4), normal(3, 4), axis=0),
                self.example("axis-last", normal(3, 4), normal(3, 4), normal(3, 4), axis=-1)]

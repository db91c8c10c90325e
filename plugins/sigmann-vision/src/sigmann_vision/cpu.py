"""The ``cpu`` handler's kernels of the vision ops: the window and normalisation passes as numba loops.

Registered as ``kernels={"cpu": "sigmann_vision.cpu:..."}``, so only the ``cpu``
handler (sigmann-cpu, which brings numba) imports this module. The portable
rules (:mod:`sigmann_vision.ops`) spend their time in per-tap NumPy slices:
a 2×2 max pool is four strided compares, four masked copies and, backwards,
four scatters through ``where`` temporaries, each a pass over the whole
batch. Here each pass is one compiled loop over (image, channel) planes,
split between the shared pool's threads (``sigma_cpu.pick``) when it is on:

* ``conv2d``: im2col and col2im (the GEMMs stay in BLAS, as in the rule),
  and the transposes between (O, N, ·) and NCHW with the bias fused in;
* ``max_pool2d``: the maximum and its tap in one pass, the gradient scattered
  to the winning taps in one pass, no padded copies;
* ``batch_norm``: per channel, the statistics (two passes, float64 sums) and
  the normalisation; backwards, the two sums and the input gradient.

Each loop writes every element of its output (no reads of a reused buffer's old
contents), so a recorded step replays them. Buffers that are not C-contiguous or
not float32/float64 run the portable rule.
"""

from __future__ import annotations

import math

from sigma_cpu import c_contiguous, pick, serial_and_parallel  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)
import numpy  # noqa: E402

from . import ops  # noqa: E402


def _fits(*arrays) -> bool:
    return arrays[0].dtype.itemsize in (4, 8) and c_contiguous(*arrays)


@numba.njit(inline="always")
def _inside(offset, stride, size, count):
    """The range of outputs o in [0, count) whose input o·stride + offset lies in [0, size)."""
    low = max(0, (stride - 1 - offset) // stride)
    high = min(count, (size - 1 - offset) // stride + 1) if offset < size else 0
    return low, max(low, high)


@serial_and_parallel
def _im2col(x, cols, top, left, sh, sw, dh, dw):
    """cols[c, i, j, n, oy, ox] = x[n, c, oy·sh − top + i·dh, ox·sw − left + j·dw], 0 outside."""
    batch, channels, height, width = x.shape
    kh, kw, oh, ow = cols.shape[1], cols.shape[2], cols.shape[4], cols.shape[5]
    for r in numba.prange(channels * kh * kw):
        c, tap = r // (kh * kw), r % (kh * kw)
        i, j = tap // kw, tap % kw
        offset = j * dw - left
        low, high = _inside(offset, sw, width, ow)
        for n in range(batch):
            for oy in range(oh):
                y = oy * sh - top + i * dh
                row = cols[c, i, j, n, oy]
                if y < 0 or y >= height:
                    row[:] = 0
                    continue
                source = x[n, c, y]
                row[:low] = 0
                for ox in range(low, high):
                    row[ox] = source[ox * sw + offset]
                row[high:] = 0


@serial_and_parallel
def _col2im(dcols, dx, top, left, sh, sw, dh, dw):
    """dx[n, c] = the sum of every column entry that read it (each channel by one thread: no two write alike)."""
    batch, channels, height, width = dx.shape
    kh, kw, oh, ow = dcols.shape[1], dcols.shape[2], dcols.shape[4], dcols.shape[5]
    for c in numba.prange(channels):
        for n in range(batch):
            dx[n, c] = 0
        for i in range(kh):
            for j in range(kw):
                offset = j * dw - left
                low, high = _inside(offset, sw, width, ow)
                for n in range(batch):
                    plane = dx[n, c]
                    for oy in range(oh):
                        y = oy * sh - top + i * dh
                        if y < 0 or y >= height:
                            continue
                        row, target = dcols[c, i, j, n, oy], plane[y]
                        for ox in range(low, high):
                            target[ox * sw + offset] += row[ox]


@serial_and_parallel
def _to_nchw(y, biases, out):
    """out[n, o] = y[o, n] + biases[o] (``biases`` of size 0: none)."""
    channels, batch = y.shape[0], y.shape[1]
    for r in numba.prange(batch * channels):
        n, o = r // channels, r % channels
        b = biases[o] if biases.size else 0
        source, target = y[o, n], out[n, o]
        for p in range(source.size):
            target[p] = source[p] + b


@serial_and_parallel
def _from_nchw(g, out):
    """out[o, n] = g[n, o]."""
    batch, channels = g.shape[0], g.shape[1]
    for r in numba.prange(batch * channels):
        n, o = r // channels, r % channels
        out[o, n] = g[n, o]


@serial_and_parallel
def _max_pool(x, out, taps, kh, kw, sh, sw, top, left):
    """out = the largest of each window (the first of equal ones, padding never), taps = its index i·kw + j."""
    batch, channels, height, width = x.shape
    oh, ow = out.shape[2], out.shape[3]
    for r in numba.prange(batch * channels):
        n, c = r // channels, r % channels
        plane, best_plane, tap_plane = x[n, c], out[n, c], taps[n, c]
        for oy in range(oh):
            for ox in range(ow):
                best, won = -math.inf, 0
                for i in range(kh):
                    y = oy * sh - top + i
                    if y < 0 or y >= height:
                        continue
                    for j in range(kw):
                        xx = ox * sw - left + j
                        if 0 <= xx < width and (plane[y, xx] > best or (i == 0 and j == 0)):
                            best, won = plane[y, xx], i * kw + j
                best_plane[oy, ox], tap_plane[oy, ox] = best, won


@serial_and_parallel
def _max_pool_unpadded(x, out, taps, kh, kw, sh, sw):
    """:func:`_max_pool` without padding, the common case: every tap inside, no bounds to check."""
    batch, channels = x.shape[0], x.shape[1]
    oh, ow = out.shape[2], out.shape[3]
    for r in numba.prange(batch * channels):
        n, c = r // channels, r % channels
        plane, best_plane, tap_plane = x[n, c], out[n, c], taps[n, c]
        for oy in range(oh):
            for ox in range(ow):
                y, xx = oy * sh, ox * sw
                best, won = plane[y, xx], 0
                for i in range(kh):
                    for j in range(kw):
                        value = plane[y + i, xx + j]
                        if value > best:
                            best, won = value, i * kw + j
                best_plane[oy, ox], tap_plane[oy, ox] = best, won


@serial_and_parallel
def _max_pool_backward(g, taps, dx, kw, sh, sw, top, left):
    """dx = each output's gradient added at its winning tap, 0 elsewhere."""
    batch, channels, height, width = dx.shape
    oh, ow = g.shape[2], g.shape[3]
    for r in numba.prange(batch * channels):
        n, c = r // channels, r % channels
        plane = dx[n, c]
        plane[:] = 0
        for oy in range(oh):
            for ox in range(ow):
                tap = taps[n, c, oy, ox]
                y, xx = oy * sh - top + tap // kw, ox * sw - left + tap % kw
                if 0 <= y < height and 0 <= xx < width:
                    plane[y, xx] += g[n, c, oy, ox]


@serial_and_parallel
def _batch_norm(x, gamma, beta, running_mean, running_var, out, xhat, inv, training, momentum, eps):
    """Per channel of x (N, C, S): the statistics (training: the batch's, two passes summed in float64; else the
    running ones, moved in training), then x̂ and out = γ·x̂ + β."""
    batch, channels, size = x.shape
    count = batch * size
    for c in numba.prange(channels):
        if training:
            total = 0.0
            for n in range(batch):
                for s in range(size):
                    total += x[n, c, s]
            mean = total / count
            total = 0.0
            for n in range(batch):
                for s in range(size):
                    d = x[n, c, s] - mean
                    total += d * d
            var = total / count
            running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean
            running_var[c] = (1 - momentum) * running_var[c] + momentum * count / (count - 1) * var
        else:
            mean, var = running_mean[c], running_var[c]
        scale = 1.0 / math.sqrt(var + eps)
        inv[c] = scale
        g, b = gamma[c], beta[c]
        for n in range(batch):
            for s in range(size):
                h = (x[n, c, s] - mean) * scale
                xhat[n, c, s] = h
                out[n, c, s] = g * h + b


@serial_and_parallel
def _batch_norm_backward(g, xhat, inv, gamma, dx, dgamma, dbeta, training):
    """Per channel: dβ = Σ g, dγ = Σ g·x̂ (float64 sums), dx = γ/σ·(g − (dβ + x̂·dγ)/M) in training, γ/σ·g else."""
    batch, channels, size = g.shape
    count = batch * size
    for c in numba.prange(channels):
        sum_g, sum_gx = 0.0, 0.0
        for n in range(batch):
            for s in range(size):
                sum_g += g[n, c, s]
                sum_gx += g[n, c, s] * xhat[n, c, s]
        dbeta[c], dgamma[c] = sum_g, sum_gx
        scale = gamma[c] * inv[c]
        shift, slope = (sum_g / count, sum_gx / count) if training else (0.0, 0.0)
        for n in range(batch):
            for s in range(size):
                dx[n, c, s] = scale * (g[n, c, s] - shift - xhat[n, c, s] * slope)


class Conv2D(ops.Conv2D):
    """:class:`~sigmann_vision.ops.Conv2D` with compiled im2col, col2im and layout changes."""

    def im2col(self, k, x, kernel, stride, padding, dilation, out_hw):
        if not _fits(x):
            return super().im2col(k, x, kernel, stride, padding, dilation, out_hw)
        cols = k.empty((x.shape[1], *kernel, x.shape[0], *out_hw))
        pick(_im2col, cols.size)(x, cols, padding[0], padding[2], *stride, *dilation)
        return cols

    def col2im(self, k, dcols, shape, kernel, stride, padding, dilation, out_hw):
        if not _fits(dcols):
            return super().col2im(k, dcols, shape, kernel, stride, padding, dilation, out_hw)
        dx = k.empty(shape)
        pick(_col2im, dcols.size)(dcols.reshape(shape[1], *kernel, shape[0], *out_hw), dx, padding[0], padding[2],
                                  *stride, *dilation)
        return dx

    def to_nchw(self, k, y, biases, out):
        if not _fits(y, out, *biases):
            return super().to_nchw(k, y, biases, out)
        bias = biases[0] if biases else k.xp.empty(0, y.dtype)
        pick(_to_nchw, y.size)(y.reshape(y.shape[0], y.shape[1], -1), bias, out.reshape(out.shape[0], out.shape[1], -1))

    def from_nchw(self, k, g, out):
        if not _fits(g, out):
            return super().from_nchw(k, g, out)
        pick(_from_nchw, g.size)(g.reshape(g.shape[0], g.shape[1], -1), out.reshape(out.shape[0], out.shape[1], -1))


class MaxPool2D(ops.MaxPool2D):
    """:class:`~sigmann_vision.ops.MaxPool2D` in one compiled pass each way."""

    def forward(self, k, x, kernel, stride=None, padding=(0, 0, 0, 0)):
        if not _fits(x):
            return super().forward(k, x, kernel, stride, padding)
        stride, out_hw = self.geometry(x.shape, kernel, stride, padding)
        out, taps = k.empty(x.shape[:2] + out_hw), k.empty(x.shape[:2] + out_hw, "int32")
        if any(padding):
            pick(_max_pool, x.size)(x, out, taps, *kernel, *stride, padding[0], padding[2])
        else:
            pick(_max_pool_unpadded, x.size)(x, out, taps, *kernel, *stride)
        return out, taps

    def backward(self, k, g, inputs, out, taps, needs, kernel, stride=None, padding=(0, 0, 0, 0)):
        x = inputs[0]
        if not _fits(g, taps):
            return super().backward(k, g, inputs, out, taps, needs, kernel, stride, padding)
        stride, _ = self.geometry(x.shape, kernel, stride, padding)
        dx = k.empty(x.shape)
        pick(_max_pool_backward, x.size)(g, taps, dx, kernel[1], *stride, padding[0], padding[2])
        return (dx,)


class BatchNorm(ops.BatchNorm):
    """:class:`~sigmann_vision.ops.BatchNorm` with one compiled pass per channel each way."""

    @staticmethod
    def _planes(a):
        return a.reshape(a.shape[0], a.shape[1], -1)

    def normalise(self, k, x, gamma, beta, running_mean, running_var, out, xhat, inv, training, momentum, eps):
        if not _fits(x, gamma, beta, running_mean, running_var, out, xhat, inv):
            return super().normalise(k, x, gamma, beta, running_mean, running_var, out, xhat, inv, training,
                                     momentum, eps)
        pick(_batch_norm, x.size)(self._planes(x), gamma, beta, running_mean, running_var, self._planes(out),
                                  self._planes(xhat), inv, bool(training), float(momentum), float(eps))

    def gradients(self, k, g, xhat, inv, gamma, dx, dgamma, dbeta, training):
        if not _fits(g, xhat, inv, gamma, dx, dgamma, dbeta):
            return super().gradients(k, g, xhat, inv, gamma, dx, dgamma, dbeta, training)
        pick(_batch_norm_backward, g.size)(self._planes(g), self._planes(xhat), inv, gamma, self._planes(dx), dgamma,
                                           dbeta, bool(training))


@serial_and_parallel
def _layer_norm(x, gamma, beta, out, xhat, inv, eps):
    """Per row of x (M, F): mean and variance (two passes, float64 sums), then x̂ and out = γ·x̂ + β."""
    rows, features = x.shape
    for r in numba.prange(rows):
        total = 0.0
        for f in range(features):
            total += x[r, f]
        mean = total / features
        total = 0.0
        for f in range(features):
            d = x[r, f] - mean
            total += d * d
        scale = 1.0 / math.sqrt(total / features + eps)
        inv[r, 0] = scale
        for f in range(features):
            h = (x[r, f] - mean) * scale
            xhat[r, f] = h
            out[r, f] = gamma[f] * h + beta[f]


@serial_and_parallel
def _layer_norm_backward(g, xhat, inv, gamma, dx, dgamma, dbeta):
    """Per row: dx = (1/σ)·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = g·γ (float64 sums); then dγ = Σ g·x̂ and dβ = Σ g
    over the rows, in one pass in row order (serial: rows would race for the same features; float64 sums)."""
    rows, features = g.shape
    for r in numba.prange(rows):
        total, projection = 0.0, 0.0
        for f in range(features):
            gh = g[r, f] * gamma[f]
            total += gh
            projection += gh * xhat[r, f]
        shift, slope, scale = total / features, projection / features, inv[r, 0]
        for f in range(features):
            dx[r, f] = scale * (g[r, f] * gamma[f] - shift - xhat[r, f] * slope)
    sum_gx, sum_g = numpy.zeros(features), numpy.zeros(features)  # float64, as the rows' sums
    for r in range(rows):
        for f in range(features):
            sum_gx[f] += g[r, f] * xhat[r, f]
            sum_g[f] += g[r, f]
    dgamma[:] = sum_gx
    dbeta[:] = sum_g


class LayerNorm(ops.LayerNorm):
    """:class:`~sigmann_vision.ops.LayerNorm` with one compiled pass per row each way: the rule's dozen NumPy passes
    (means, temporaries, broadcasts) cost the baby GPT ~8 ms of a ~67 ms step (issue 39)."""

    def forward(self, k, x, gamma, beta, eps=1e-5):
        if not _fits(x, gamma, beta):
            return super().forward(k, x, gamma, beta, eps)
        out, xhat, inv = k.empty(x.shape), k.empty(x.shape), k.empty((x.shape[0], 1))
        pick(_layer_norm, x.size)(x, gamma, beta, out, xhat, inv, float(eps))
        return out, (xhat, inv)

    def backward(self, k, g, inputs, out, saved, needs, eps=1e-5):
        (xhat, inv), gamma = saved, inputs[1]
        if not _fits(g, xhat, inv, gamma):
            return super().backward(k, g, inputs, out, saved, needs, eps)
        dx, dgamma, dbeta = k.empty(g.shape), k.empty(gamma.shape), k.empty(gamma.shape)
        pick(_layer_norm_backward, g.size)(g, xhat, inv, gamma, dx, dgamma, dbeta)
        return dx if needs[0] else None, dgamma if needs[1] else None, dbeta if needs[2] else None

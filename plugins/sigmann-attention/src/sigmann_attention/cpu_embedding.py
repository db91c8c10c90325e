"""The ``cpu`` handler's kernel of ``embedding``: the table's gradient scattered by one numba loop.

The portable rule scatters through the array module's ``add.at``, which NumPy
runs element by element through its generic ufunc machinery: ~1.1 ms of the
baby GPT's step for 768 rows of 128 (profiled, issue 39), where one compiled
pass over the rows takes a few hundredths of that. The loop splits the width
into blocks of :data:`COLUMNS` (one SIMD register of float32): each block runs
the rows in order, so a repeated id adds up in order, and blocks never touch
the same element, so the shared pool's threads may take them apart.
"""

from __future__ import annotations

from sigma_cpu import c_contiguous, pick, serial_and_parallel  # sigma_cpu configures numba's cache first

import numba  # noqa: E402  (after sigma_cpu has chosen numba's cache directory)

from .ops import Embedding  # noqa: E402

#: Columns per block of the scatter.
COLUMNS = 16


@serial_and_parallel
def _scatter_rows(rows, g, out):
    """out = zeros, then out[rows[i]] += g[i] for each position i, a block of columns at a time."""
    positions, width = g.shape
    for block in numba.prange((width + COLUMNS - 1) // COLUMNS):
        f0 = block * COLUMNS
        f1 = min(f0 + COLUMNS, width)
        for r in range(out.shape[0]):
            for f in range(f0, f1):
                out[r, f] = 0
        for i in range(positions):
            r = rows[i]
            for f in range(f0, f1):
                out[r, f] += g[i, f]


class ScatterEmbedding(Embedding):
    """:class:`~sigmann_attention.ops.Embedding` with the table's gradient scattered by one loop (see the module
    docstring); the portable rule runs buffers the loop was not compiled for."""

    def backward(self, k, g, inputs, out, rows, needs):
        ids, weights = inputs
        if not needs[1] or g.dtype.itemsize not in (4, 8) or not c_contiguous(g, rows):
            return super().backward(k, g, inputs, out, rows, needs)
        d_weights = k.empty(weights.shape)
        flat_g = g.reshape(-1, weights.shape[1])
        pick(_scatter_rows, flat_g.size)(rows.reshape(-1), flat_g, d_weights)
        return (k.full(ids.shape, 0.0) if needs[0] else None), d_weights

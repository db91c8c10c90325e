"""Compute: the only code that touches live data. The handler (ops, tape, sessions), the op table, the raw kernels
over ``xp`` that backends override, NDArray handles, the buffer pool, handler selection and random streams."""

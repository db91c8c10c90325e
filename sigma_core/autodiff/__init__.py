"""Reverse-mode automatic differentiation over handler kernels.

A :class:`~sigma_core.autodiff.tape.Tape` records, for every op whose inputs
depend on a watched array, the op's inputs, output and vector-Jacobian product
(:mod:`sigma_core.autodiff.vjps`). ``tape.gradient(cost, params)`` walks the
record backwards once. The VJPs use the handler's kernels, so a new backend
gets gradients without writing any.
"""

from .tape import Tape

__all__ = ["Tape"]

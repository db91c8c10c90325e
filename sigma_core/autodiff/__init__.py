"""Reverse-mode automatic differentiation over handler kernels.

A :class:`~sigma_core.autodiff.tape.Tape` records the ops on watched arrays
with their vector-Jacobian products (:mod:`sigma_core.autodiff.vjps`), written
with the handler's kernels, so a new backend gets gradients without writing any.
"""

from .tape import Tape

__all__ = ["Tape"]

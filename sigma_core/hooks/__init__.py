"""Training hooks: code that reports, scores, stops and steers a run from inside the training loop.

A hook fires on a time step (``every(1, "epoch")``), gated by criteria, and
reads and writes the operator's registry (:mod:`sigma_core.hooks.publication`).
Run files list them in ``[[hooks]]``; plugins register more with ``register_hooks``.
"""

from .access import HookError
from .base import Hook
from .criteria import All, Any, Criteria, External, Extrema, Not, Repeated, Threshold
from .timestep import TimeScale, TimeStep, after, every

__all__ = ["All", "Any", "Criteria", "External", "Extrema", "Hook", "HookError", "Not", "Repeated", "Threshold",
           "TimeScale", "TimeStep", "after", "every"]

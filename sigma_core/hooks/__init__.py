"""Training hooks: time steps, criteria and the hooks that report, score, stop and steer a run.

A hook fires on a :mod:`time step <sigma_core.hooks.timestep>` (``every(1,
"epoch")``), gated by :mod:`criteria <sigma_core.hooks.criteria>`, and reads and
writes the operator's :mod:`registry <sigma_core.hooks.publication>`. Attach
hooks to :class:`~sigma_core.operators.SingleWorkerOperator` or list them in a
run file's ``[[hooks]]`` (see :mod:`sigma_core.hooks.config`). Built-in hook
types are registered in :mod:`sigma_core.builtins`; plugins add theirs the same way.
"""

from .access import HookError
from .base import Hook
from .criteria import All, Any, Criteria, External, Extrema, Not, Repeated, Threshold
from .timestep import TimeScale, TimeStep, after, every

__all__ = [
    "All", "Any", "Criteria", "External", "Extrema", "Hook", "HookError", "Not", "Repeated", "Threshold",
    "TimeScale", "TimeStep", "after", "every",
]

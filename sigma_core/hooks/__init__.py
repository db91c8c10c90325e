"""Hooks: the one protocol through which code takes part in a run (:mod:`sigma_core.hooks.base`), its dispatcher,
the run's values, and the core's own hooks (checkpoints, a plain line per epoch; the rest: sigmann-monitors).
Importing this package is cheap (no NumPy): ``sigma`` commands that build no run pay nothing for it.
"""

from sigma_core.hooks.base import EVENTS, Hook, HookError

__all__ = ["EVENTS", "Hook", "HookError"]

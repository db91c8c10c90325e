"""Hooks: the one protocol through which code takes part in a run (see :mod:`sigma_core.hooks.base`).

The loop emits each event once through a :class:`~sigma_core.hooks.dispatch.Dispatcher`;
hooks read the run's values (:mod:`sigma_core.hooks.values`). The built-in ones:
learning-rate schedules, stoppers, checkpoints, progress bars and the metrics files.
Run files list them in ``[[hooks]]``; plugins register more with ``register_hooks``.
Importing this package is cheap (no NumPy): ``sigma`` commands that build no run pay nothing for it.
"""

from .base import EVENTS, Hook, HookError

__all__ = ["EVENTS", "Hook", "HookError"]

"""The ``debug`` hook: the debug handler's settings for one run, and its count of reports when the run ends.

``[[hooks]] type = "debug"`` (or ``--monitor debug:throw=false``) with the keys of
:class:`~sigmann_debug.checks.Checks`. The handler is chosen as any handler is (``--handler debug:cpu``); this hook
only tunes it, so a run whose handler is not a debug one is refused in one line rather than silently unchecked.
"""

import sys

from sigma_core import Hook, HookError

from sigmann_debug.checks import RULES, Checks


class DebugChecks(Hook):
    """Sets the run's debug handler's :class:`Checks` when attached; prints the reports' summary when detached."""

    argument_rules = RULES
    order = -100  # attached before the hooks that may run ops, so that they are checked as configured

    def __init__(self, nan: bool = True, inf: bool = True, shapes: bool = True, limit: float | None = None,
                 throw: bool = True):
        self.checks = Checks(nan=nan, inf=inf, shapes=shapes, limit=limit, throw=throw)
        self.handler = None

    def attach(self, run):
        super().attach(run)
        handler = run.trainer.handler
        if not hasattr(handler, "configure"):
            raise HookError(f"hook {self.name!r}: the run's handler is {handler.name!r}, which checks nothing; "
                            f"choose --handler debug:{handler.name} (or [handler] name = \"debug:{handler.name}\")")
        handler.configure(self.checks)
        self.handler = handler

    def detach(self):
        if self.handler is not None:
            print(self.handler.reports.summary(), file=sys.stderr)

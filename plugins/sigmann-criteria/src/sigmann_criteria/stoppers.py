"""The ``stop_when`` hook: ends a run when its criteria pass (the core's ``stop`` counts epochs only)."""

from __future__ import annotations

import logging

from sigma_core import HookError

from .hook import CriteriaHook

log = logging.getLogger("sigma.hooks")


class StopWhen(CriteriaHook):
    """Stops the run when its criteria (``on``) pass, checked on its cadence (by default after every epoch)."""

    default_scale = "epoch"
    default_priority = 10000  # after the hooks whose results the criteria judge

    def __init__(self, *, every=None, **options):
        super().__init__(every, **options)
        if self.criteria is None:
            raise HookError("stop_when: it needs criteria, e.g. on = { threshold = \"optimiser.cost_total\", "
                            "op = \"<\", value = 0.1 }")

    def invoke(self, registry, resolver):
        log.info("stopping after epoch %d iteration %d: %r passed", registry["epoch"], registry["iteration"], self.criteria)
        self.run.command("stop")

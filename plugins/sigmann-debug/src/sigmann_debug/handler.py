"""The ``debug`` handler: any installed handler, its every op and VJP checked (``--handler debug:cpu``).

``create_handler("debug:cpu")`` builds the ``cpu`` handler and hands it to :meth:`DebugHandler.around`, which makes
it an instance of a subclass of its own class with :class:`Checked` in front: the same kernels, buffers and random
generator, the same ``name`` (an op finds the wrapped handler's kernels by it), plus a check of what every op
returns. A handler not chosen is untouched: nothing is paid where ``debug`` is not named.

The checks' settings and the reports are the subclass's, not the instance's, so that a worker's handler made as
``type(handler)(dtype=...)`` (sigmann-threads) checks the same way and counts into the same reports.
"""

import logging
import threading

from sigma_core import create_handler

from sigmann_debug.checks import Checks
from sigmann_debug.where import NOWHERE, current_place, current_step

log = logging.getLogger("sigma")

AUTO = "auto"  # the handler that debug alone wraps

#: The most op places kept for VJP reports: far more than a training step's ops (a tape or session clears them).
MAX_PLACES = 100_000
#: What a compiled step (sigmann-replay) is told when it records under the debug handler: it runs steps as written.
NOT_REPLAYED = "the debug handler checks every op, and a replayed step would run none of its checks"


class Reports:
    """The problems found, counted across every handler of one wrapped class (workers' threads included)."""

    def __init__(self):
        self.count, self.first, self._lock = 0, None, threading.Lock()

    def add(self, text: str) -> None:
        with self._lock:
            self.count += 1
            self.first = self.first or text

    def summary(self) -> str:
        if not self.count:
            return "debug: no op reported a problem"
        return f"debug: {self.count} report{'s' * (self.count != 1)}; the first: {self.first}"


class Checked:
    """Put in front of a handler class by :meth:`DebugHandler.around`: checks each op's output after it runs, and
    each gradient its VJP returns when the tape is played back. Training on after a report (``throw = false``), one
    report per iteration (session): the first bad op; the ones after it in that step see its NaN."""

    checks = Checks()
    reports: Reports
    debug_name = "debug"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start_checking()

    def start_checking(self) -> None:
        """The per-handler state: where each recorded op ran (for its VJP's report), and whether this iteration
        has reported already."""
        self._places, self._reported = {}, False

    def __repr__(self):
        return f"<{type(self).__name__} {self.debug_name} {self.dtype}>"

    @classmethod
    def configure(cls, checks: Checks) -> None:
        """Check with ``checks`` from now on: on this handler and every one made from its class."""
        cls.checks = checks

    def op(self, name, *inputs, **params):
        if self.recorder is not None:
            self.recorder.refuse(NOT_REPLAYED)
        out = super().op(name, *inputs, **params)
        place, raw = current_place(), out.data
        if len(self._places) >= MAX_PLACES:  # ops outside any tape and session (inference): none will be played back
            self._places.clear()
        self._places[id(raw)] = place
        problem = self.checks.problem(self.kernels, raw)
        if problem is not None:
            self._report(*problem, f"op {name!r} {place}, forward")
        return out

    def tape(self):
        self._places.clear()  # one tape at a time: the last one's ops are played back already
        return super().tape()

    def backward(self, records, slots, output, sources, seed=None):
        checked = [(*record[:4], self._checked_vjp(record[4], record[3]), record[5]) for record in records]
        return super().backward(checked, slots, output, sources, seed)

    def _checked_vjp(self, vjp, raw_out):
        """``vjp``, its gradients checked against their inputs' shapes, reported at the place of its forward op."""
        place = self._places.get(id(raw_out), NOWHERE)

        def checked(k, g, raw_inputs, out, saved, needs):
            grads = vjp(k, g, raw_inputs, out, saved, needs)
            for index, (grad, x) in enumerate(zip(grads, raw_inputs)):
                problem = None if grad is None else self.checks.problem(k, grad, getattr(x, "shape", None))
                if problem is not None:
                    self._report(*problem, f"op {vjp.__name__!r} {place}, backward (the gradient of input {index})")
            return grads

        return checked

    def begin_session(self):
        self._reported = False
        self._places.clear()
        super().begin_session()

    def _report(self, error: type, problem: str, where: str) -> None:
        """Stop the run on the first problem (``throw``), else log it (once per iteration) and count it."""
        if self._reported and not self.checks.throw:
            return
        self._reported = True
        text = f"debug: {where}, {current_step()}: {problem}"
        self.reports.add(text)
        if self.checks.throw:
            raise error(text)
        log.warning("%s", text)


class DebugHandler:
    """What ``debug`` is registered as: not a handler itself but the maker of one around another (``debug:cpu``).
    Built by its name alone, as any handler may be (``create_handler("debug")``), it wraps the one ``auto`` picks."""

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return True, ""

    def __new__(cls, dtype="float32", seed=None):
        return cls.around(create_handler(AUTO, dtype=dtype, seed=seed))

    @staticmethod
    def around(handler):
        """``handler``, its class now a subclass with :class:`Checked` in front (its own Reports)."""
        wrapped = type(handler)
        checked = type(f"Debug{wrapped.__name__}", (Checked, wrapped),
                       {"reports": Reports(), "debug_name": f"debug:{wrapped.name}", "__module__": __name__})
        handler.__class__ = checked  # the instance is built already: its kernels, buffers and generator are kept
        handler.start_checking()
        return handler

"""Whether a run's handler arrays pile up: a count of the live ones after every epoch, which must not grow.

A run makes the same arrays every epoch (its steps, the held-out evaluation,
what hooks read), so once it has warmed up (lazy state made, steps recorded)
the arrays alive at the end of an epoch are as many after the tenth epoch as
after the second. An array that something holds on to for good, epoch after
epoch, is memory that grows without bound over a long run: issue 24's held-out
evaluations kept in a session list that a replayed step never emptied grew
13.8 MB per epoch. Attach :class:`ArrayCensus` to a loop with the hook,
operator or step compiler under test (and :class:`Prober`, which does between
steps what hooks do), then call :meth:`ArrayCensus.assert_flat`.
"""

from __future__ import annotations

import gc

import numpy

from sigma_core import Hook, NDArray


def live_arrays() -> int:
    """How many handler arrays (:class:`~sigma_core.NDArray`, numbers too) are alive now, on any handler,
    after a full garbage collection: what nothing holds any more does not count."""
    gc.collect()
    # type(o), not isinstance(o, ...): isinstance also asks o.__class__, which some module proxies (torch's
    # deprecated attributes) answer with a warning.
    return sum(1 for o in gc.get_objects() if issubclass(type(o), NDArray))


class ArrayCensus(Hook):
    """After every epoch, the live arrays (:func:`live_arrays`) and the arrays the trainer's handler holds in its
    session lists (``Handler.session_arrays``); it runs after every other hook of the epoch."""

    name = "array census"
    order = 10**6

    def __init__(self):
        #: One ``(live arrays, session arrays)`` per epoch, in order.
        self.counts: list[tuple[int, int]] = []

    def on_epoch(self, report):
        self.counts.append((live_arrays(), self.run.trainer.handler.session_arrays))

    def assert_flat(self, warm_up: int = 2) -> None:
        """Fail unless every epoch after the first ``warm_up`` ends with exactly as many arrays as epoch ``warm_up``
        did (at least two epochs must follow it)."""
        assert len(self.counts) >= warm_up + 2, f"{len(self.counts)} epochs counted, {warm_up + 2} needed"
        settled = self.counts[warm_up - 1]
        grown = [(epoch, count) for epoch, count in enumerate(self.counts[warm_up:], warm_up + 1) if count != settled]
        assert not grown, (f"handler arrays (live, in session lists) after epoch {warm_up}: {settled}; later: "
                           + ", ".join(f"epoch {epoch}: {count}" for epoch, count in grown))


class Prober(Hook):
    """Does between steps what hooks do with a run's arrays: after every iteration it reads the cost and every
    parameter (``run.values``) and sends a ``call`` command that predicts ``inputs`` (host data, a batch of the
    network's input) in inference mode on the training thread, as a dashboard classifies a drawing."""

    name = "prober"

    def __init__(self, inputs):
        self.inputs = numpy.asarray(inputs)
        #: The latest prediction's outputs (a host copy), in a list of one.
        self.predictions: list = []

    def on_iteration(self):
        values = self.run.values
        float(values["cost"])
        values.matching(("network.layers.*",))
        self.run.command("call", fn=self.predict)

    def predict(self):
        """The network's predictions for ``inputs`` (``Network.predict``, as ``sigma predict`` makes them); the
        latest only is kept, so host memory stays flat too."""
        self.predictions[:] = [self.run.trainer.network.predict(self.inputs)]

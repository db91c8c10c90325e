"""What a hook sees of a run: its values at an event, by flat name, and on the training thread the live objects.

``run.values`` (a :class:`Values`) is read-only and flat::

    time, runtime            wall-clock time, and seconds since the run started
    epoch                    epochs completed (0 during the first)
    iteration                iterations completed in the current epoch
    total_iterations         iterations trained in all, over resumes
    learning_rate            the optimiser's rate for the next step
    cost                     the training cost of what the event closes: the last iteration's,
                             or at on_epoch the epoch's mean
    seconds, iterations_per_s, <iterator>.<score>
                             at on_epoch: the epoch's time, speed and each held-out iterator's
                             scores (validation.accuracy, validation.cost, validation.top3, ...)
    network.layers.<layer>.<param>     a parameter, as a NumPy copy
    optimiser.updates.<layer>.<param>  its last update, while ``optimiser.publish_updates`` is on
    ...                      and whatever hooks publish (``run.publish("bits_per_character.train", x)``)

Values are read when asked, at the boundary, on the training thread: a run
whose hooks never read the cost never copies it from the device. The cost and
the arrays are *device values*; everything else is a *host value*. A threaded
hook gets a copy made on the training thread when the event happened: every
host value, and the device values its :attr:`~sigma_core.hooks.base.Hook.reads`
names for that event.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Mapping

import numpy

from ..config import require
from .base import HookError

#: Host values every event has, and how to read each from a live view.
HOST = {
    "time": lambda run: time.time(),
    "runtime": lambda run: time.perf_counter() - run.started,
    "epoch": lambda run: run.trainer.epoch,
    "iteration": lambda run: run.trainer.iteration,
    "total_iterations": lambda run: run.trainer.total_iterations,
    "learning_rate": lambda run: float(run.trainer.optimiser.learning_rate),
}
PARAMETERS, UPDATES = "network.layers.", "optimiser.updates."

_MISSING = object()


class ValueNotFound(HookError, KeyError):
    """A hook asked for a value the run does not have at this event (or did not copy for a threaded hook)."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0])


def epoch_values(report) -> dict:
    """The values an ``on_epoch`` event adds, from its :class:`~sigma_core.loop.EpochReport`."""
    values = {"cost": report.cost, "seconds": report.seconds,
              "iterations_per_s": report.iterations / max(report.seconds, 1e-9)}
    values.update((f"{name}.{score}", float(value)) for name, scores in report.validation.items()
                  for score, value in scores.items() if score not in ("records", "top1"))  # top1 is accuracy
    return values


class Best:
    """The best a run value has been so far (``mode`` ``"min"`` or ``"max"``): what early stopping and
    keeping the best checkpoints judge by. ``who`` names the hook in messages."""

    def __init__(self, name: str, mode: str, who: str):
        require(f"{who}: mode", ("min", "max"), mode)
        self.name, self.mode, self.value = name, mode, math.nan  # NaN before the first reading

    def update(self, values) -> bool:
        """Read the value from ``values`` (a run's): :meth:`offer` it."""
        return self.offer(float(values[self.name]))

    def offer(self, current: float) -> bool:
        """True, and remembered, when ``current`` is the first value or a new best."""
        if math.isnan(self.value) or (current < self.value if self.mode == "min" else current > self.value):
            self.value = current
            return True
        return False


class Values(Mapping):
    """The run's values at one event, by flat name; see the module docstring.

    Built by the dispatcher: ``items`` are the values fixed at the event (an
    epoch's report, or all of a threaded hook's copy); with a live ``run`` the
    others are read from it when asked.
    """

    __slots__ = ("_items", "_run", "event", "_copied_for")

    def __init__(self, event: str, items: dict, run=None, copied_for: str | None = None):
        self.event, self._items, self._run, self._copied_for = event, items, run, copied_for

    def __getitem__(self, name):
        value = self._items.get(name, _MISSING)
        if value is _MISSING and self._run is not None:
            value = self._run.read(name)
        if value is _MISSING:
            raise ValueNotFound(self._missing(name))
        return value

    def __iter__(self):
        yield from self._items
        if self._run is not None:
            yield from (name for name in self._run.names() if name not in self._items)

    def __len__(self):
        return sum(1 for _ in self)

    def __contains__(self, name):
        return name in self._items or (self._run is not None and self._run.read(name, probe=True) is not _MISSING)

    def matching(self, patterns) -> dict:
        """Copies of the numbers and arrays (as NumPy arrays) whose names match ``patterns`` (wildcards allowed)."""
        names = list(self)
        found = {}
        for pattern in patterns:
            for name in fnmatch.filter(names, pattern):
                value = self[name]
                if isinstance(value, numpy.ndarray) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
                    found[name] = value
        return found

    def copy(self, reads=()) -> Values:
        """A copy that outlives the event (for another thread): every host value, and the device values ``reads`` names."""
        run = self._run
        if run is None:
            return self
        items = {name: read(run) for name, read in HOST.items()}
        items.update(run.published)
        items.update(self._items)
        for pattern in reads:
            if pattern in items:
                continue
            if pattern == "cost":
                items["cost"] = run.trainer.last_cost
            else:
                items.update(self.matching((pattern,)))
        return Values(self.event, items)

    def for_thread(self, who: str) -> Values:
        """This copy, with messages that tell the threaded hook ``who`` how to ask for what it lacks."""
        return Values(self.event, self._items, copied_for=who)

    def _missing(self, name: str) -> str:
        device = name == "cost" or name.startswith((PARAMETERS, UPDATES))
        if self._copied_for is not None and device:
            return (f"hook {self._copied_for!r} is threaded and {name!r} was not copied for it: name it in its reads, "
                    f"e.g. reads = {{\"on_{self.event}\": ({name!r},)}}")
        names = sorted(self)
        return (f"no run value {name!r} at on_{self.event} (values: {', '.join(names[:12])}"
                f"{', ...' if len(names) > 12 else ''})")


class RunView:
    """The run as a hook sees it: ``values`` at the current event, commands, published values, live objects.

    One live view per run, on the training thread; a threaded hook gets, per
    event, a view over its copy of the values (:meth:`for_thread`), which
    refuses the live objects. ``loop`` is the :class:`~sigma_core.loop.Loop`
    running the run (its state, its strategy, its ``signal_*`` methods).
    """

    def __init__(self, loop, started: float | None = None, *, values: Values | None = None, published=None,
                 threaded: str | None = None):
        self.loop = loop
        self.started = time.perf_counter() if started is None else started
        self.published = {} if published is None else published  # shared by a run's views; see publish()
        self.values = Values("start", {}, self) if values is None else values
        self._threaded = threaded  # the name of the threaded hook this view is for

    # -- what never changes during a run (any thread) ----------------------------------------------
    @property
    def name(self) -> str:
        return self.loop.trainer.name

    @property
    def config(self) -> dict | None:
        """The validated run file, if the run was built from one."""
        return self.loop.trainer.run_config

    @property
    def epochs(self) -> int:
        """The epochs the run is to train in all (a command may extend it)."""
        return self.loop.epochs

    @property
    def directory(self):
        """The run's own directory (a Path, ``runs/<name>/version_N``, made when first asked for), where hooks
        write their files: the one place it is decided (:mod:`sigma_core.rundir`); a resumed run keeps its own."""
        return self.loop.directory

    def resume_command(self, checkpoint) -> str | None:
        """The shell command that continues this run from ``checkpoint`` (None for a run started in code)."""
        return self.loop.resume_command(checkpoint)

    # -- steering (any thread) ----------------------------------------------------------------------
    def command(self, name: str, **arguments):
        """Steer the run: ``pause``, ``resume``, ``stop``, ``reset``, ``step``, ``set`` (``key=..., value=...``),
        ``call`` (``fn=...``, returns a Future); applied at the loop's next iteration boundary."""
        return self.loop.command(name, **arguments)

    def publish(self, name: str, value) -> None:
        """Make ``value`` a run value under ``name`` for the hooks after this one (and later events).

        From a threaded hook it shows from the next event on. The run's own names cannot be replaced.
        """
        if name in HOST or name == "cost" or name.startswith((PARAMETERS, UPDATES)):
            raise HookError(f"cannot publish {name!r}: it is one of the run's own values")
        self.published[name] = value

    # -- the live objects (training thread, inline hooks) ----------------------------------------------
    @property
    def trainer(self):
        if self._threaded is not None:
            raise HookError(f"hook {self._threaded!r} is threaded: it reads run.values, not the live trainer "
                            "(set up in attach(), which runs on the training thread)")
        return self.loop.trainer

    @property
    def network(self):
        return self.trainer.network

    @property
    def optimiser(self):
        return self.trainer.optimiser

    # -- reading (live view) --------------------------------------------------------------------
    def read(self, name: str, probe: bool = False):
        """The live value ``name``, or a marker if there is none (``probe``: do not read a device value)."""
        host = HOST.get(name)
        if host is not None:
            return host(self)
        value = self.published.get(name, _MISSING)
        if value is not _MISSING:
            return value
        trainer = self.loop.trainer
        if name == "cost":
            return True if probe else trainer.last_cost
        for prefix, arrays in ((PARAMETERS, trainer.network.parameters),
                               (UPDATES, trainer.optimiser.published.get("updates", {}))):
            if name.startswith(prefix):
                array = arrays.get(name[len(prefix):])
                if array is not None:
                    return True if probe else array.to_numpy()
        return _MISSING

    def names(self) -> list[str]:
        trainer = self.loop.trainer
        updates = trainer.optimiser.published.get("updates", {})
        return [*HOST, *self.published, "cost", *(PARAMETERS + pid for pid in trainer.network.parameters),
                *(UPDATES + pid for pid in updates)]

    def at(self, event: str, items: dict) -> Values:
        """Make ``values`` the values of ``event`` (with ``items`` fixed by it) and return them."""
        self.values = Values(event, items, self)
        return self.values

    def for_thread(self, values: Values, who: str) -> RunView:
        """A view for the threaded hook ``who`` over its copy ``values``."""
        return RunView(self.loop, self.started, values=values.for_thread(who), published=self.published,
                       threaded=who)

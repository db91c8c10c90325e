"""What a hook sees of a run: its values at an event, by flat name, and on the training thread the live objects.

``run.values`` (a :class:`Values`) is read-only and flat: ``epoch``, ``iteration``, ``total_iterations``,
``learning_rate``, ``cost``, ``time``, ``runtime``; at ``on_epoch`` also ``seconds``, ``iterations_per_s`` and
``<iterator>.<score>``; ``network.layers.<layer>.<param>``, ``optimiser.updates.<layer>.<param>``; and what hooks
publish (docs/plugins.md, "Hook", says what each holds). A value is read when asked, on the training thread: a
run whose hooks never read the cost never copies it from the device. The cost and the arrays are *device
values*, the rest *host values*; a threaded hook gets a copy made at the event of every host value and of the
device values its :attr:`~sigma_core.hooks.base.Hook.reads` names.
"""

import fnmatch
import math
import time
from collections.abc import Mapping

import numpy

from sigma_core.config import require
from sigma_core.hooks.base import HookError

#: The host values every event has (:func:`host_values`).
HOST = ("time", "runtime", "epoch", "iteration", "total_iterations", "learning_rate")
PARAMETERS, UPDATES = "network.layers.", "optimiser.updates."
WILDCARDS = frozenset("*?[")  # what makes a name a pattern for fnmatch

_MISSING = object()


def host_values(run) -> dict:
    """The :data:`HOST` values of the live view ``run``, read at once: half the cost of six reads, per event."""
    trainer = run.loop.trainer
    return {"time": time.time(), "runtime": time.perf_counter() - run.started, "epoch": trainer.epoch,
            "iteration": trainer.iteration, "total_iterations": trainer.total_iterations,
            "learning_rate": float(trainer.optimiser.learning_rate)}


class ValueNotFound(HookError, KeyError):
    """A hook asked for a value the run does not have at this event (or did not copy for a threaded hook)."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0])


def epoch_values(report) -> dict:
    """The values an ``on_epoch`` event adds, from its :class:`~sigma_core.training.loop.EpochReport`."""
    values = {"cost": report.cost, "seconds": report.seconds,
              "iterations_per_s": report.iterations / max(report.seconds, 1e-9)}
    values.update((f"{name}.{score}", float(value)) for name, scores in report.validation.items()
                  for score, value in scores.items() if score not in ("records", "top1"))  # top1 is accuracy
    return values


class Best:
    """The best a run value has been so far (``mode`` ``"min"`` or ``"max"``), as early stopping and keeping the
    best checkpoints judge it; ``who`` names the hook in messages."""

    def __init__(self, name: str, mode: str, who: str):
        require(f"{who}: mode", ("min", "max"), mode)
        self.name, self.mode, self.value = name, mode, math.nan  # NaN before the first reading

    def update(self, values) -> bool:
        """:meth:`offer` the value as ``values`` (a run's) hold it."""
        return self.offer(float(values[self.name]))

    def offer(self, current: float) -> bool:
        """True, and remembered, when ``current`` is the first value or a new best."""
        if math.isnan(self.value) or (current < self.value if self.mode == "min" else current > self.value):
            self.value = current
            return True
        return False


class Values(Mapping):
    """The run's values at one event: ``items`` fixed by the event (an epoch's report, or all of a threaded hook's
    copy) and, with a live ``run``, the others read from it when asked."""

    __slots__ = ("_items", "_run", "event", "copied_for")

    def __init__(self, event: str, items: dict, run=None, copied_for: str | None = None):
        self.event, self._items, self._run = event, items, run
        self.copied_for = copied_for  # the threaded hook this copy was made for

    def __getitem__(self, name):
        if (value := self._get(name)) is _MISSING:
            raise ValueNotFound(self._missing(name))
        return value

    def _get(self, name: str):
        value = self._items.get(name, _MISSING)
        return self._run.read(name) if value is _MISSING and self._run is not None else value

    def __iter__(self):
        yield from self._items
        if self._run is not None:
            yield from (name for name in self._run.names() if name not in self._items)

    def __len__(self):
        return sum(1 for _ in self)

    def matching(self, patterns) -> dict:
        """Copies of the numbers and arrays (as NumPy arrays) whose names match ``patterns`` (wildcards allowed); a
        plain name is looked up alone, as listing every name would cost a threaded hook's copy ten times more."""
        names, found = None, {}
        for pattern in patterns:
            plain = WILDCARDS.isdisjoint(pattern)
            names = names if plain or names is not None else list(self)
            for name in (pattern,) if plain else fnmatch.filter(names, pattern):
                value = self._get(name)
                if isinstance(value, numpy.ndarray) or isinstance(value, (int, float)) and not isinstance(value, bool):
                    found[name] = value
        return found

    def copy(self, reads=()) -> "Values":
        """A copy that outlives the event (for another thread): the host values and those ``reads`` names."""
        run = self._run
        if run is None:
            return self
        items = {**host_values(run), **run.published, **self._items}
        if reads:
            items.update(self.matching(reads))
        return Values(self.event, items)

    def _missing(self, name: str) -> str:
        if self.copied_for is not None and (name == "cost" or name.startswith((PARAMETERS, UPDATES))):
            return (f"hook {self.copied_for!r} is threaded and {name!r} was not copied for it: name it in its reads, "
                    f"e.g. reads = {{\"on_{self.event}\": ({name!r},)}}")
        names = sorted(self)
        return (f"no run value {name!r} at on_{self.event} (values: {', '.join(names[:12])}"
                f"{', ...' if len(names) > 12 else ''})")


class RunView:
    """The run as a hook sees it: ``values`` at the current event, commands, published values, live objects.

    One live view per run, on the training thread; a threaded hook gets per event a view over its copy of the
    values (:meth:`for_thread`), which refuses the live objects. ``loop`` is the
    :class:`~sigma_core.training.loop.Loop`.
    """

    def __init__(self, loop, started: float | None = None, *, values: Values | None = None, published=None):
        self.loop = loop
        self.started = time.perf_counter() if started is None else started
        self.published = {} if published is None else published  # shared by a run's views; see publish()
        self.values = Values("start", {}, self) if values is None else values  # a threaded hook's: its copy
        #: Any thread: steer the run (:meth:`Loop.command <sigma_core.training.loop.Loop.command>`: stop, pause,
        #: set, ...), and the shell command that continues it from a checkpoint (None for a run started in code).
        self.command, self.resume_command = loop.command, loop.resume_command

    @property
    def name(self) -> str:
        return self.loop.trainer.name

    @property
    def config(self) -> dict | None:
        """The validated run file, if the run was built from one."""
        return self.loop.config

    @property
    def epochs(self) -> int:
        """The epochs the run is to train in all (a command may extend it)."""
        return self.loop.epochs

    @property
    def directory(self):
        """The run's own directory, where hooks write their files (a Path, made when first asked for)."""
        return self.loop.directory

    def publish(self, name: str, value) -> None:
        """Make ``value`` the run value ``name`` for the hooks after this one and later events (from a threaded
        hook: from the next event on). The run's own names cannot be replaced."""
        if name in HOST or name == "cost" or name.startswith((PARAMETERS, UPDATES)):
            raise HookError(f"cannot publish {name!r}: it is one of the run's own values")
        self.published[name] = value

    @property
    def trainer(self):
        """The live trainer: for inline hooks (and any hook's ``attach``), on the training thread."""
        if self.values.copied_for is not None:
            raise HookError(f"hook {self.values.copied_for!r} is threaded: it reads run.values, not the live trainer "
                            "(set up in attach(), which runs on the training thread)")
        return self.loop.trainer

    @property
    def network(self):
        return self.trainer.network

    @property
    def optimiser(self):
        return self.trainer.optimiser

    def read(self, name: str):
        """The live value ``name``, or a marker if there is none."""
        if name in HOST:
            return host_values(self)[name]
        if name in self.published:
            return self.published[name]
        trainer = self.loop.trainer
        if name == "cost":
            return trainer.last_cost
        for prefix, arrays in ((PARAMETERS, trainer.network.parameters),
                               (UPDATES, trainer.optimiser.published.get("updates", {}))):
            array = arrays.get(name[len(prefix):]) if name.startswith(prefix) else None
            if array is not None:
                return array.to_numpy()
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

    def for_thread(self, event: str, items: dict, who: str) -> "RunView":
        """A view for the threaded hook ``who`` over its copy ``items`` of the values at ``event``."""
        return RunView(self.loop, self.started, values=Values(event, items, copied_for=who), published=self.published)

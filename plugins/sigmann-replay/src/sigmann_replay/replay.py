"""Recorded training steps: run a step once, then replay its kernel calls.

:class:`StepReplay` is a step compiler (``trainer.compile_step(StepReplay.compile)``, ``training.compile =
"replay"``). A
training step of unchanged *signature* (batch shapes and dtypes, optimiser, and the same versions of
the trainer, network, optimiser and handler: no layer edited, no freeze filter, parameter or optimiser
buffer replaced since) calls the same kernels on the same buffers each time.
While one runs, a :class:`Recorder` stands in for the handler's kernels (``Handler.record``)
and keeps every top-level call with its raw arguments and the pool buffers it
was handed. Later steps of that signature skip the tape, NDArray wrapping, VJP
dispatch and pool: the new batch is bound in place of the recorded one and the
calls run again in order, each given back its recorded buffers by a
:class:`ReplayPool`; a kernel offering a *launch* (below) runs as that, unless it reads a batch
section bound anew in each replay (one larger than :data:`COPY_MAX`). The bits
are those of a normal step: generators advance inside the kernels (fresh
dropout masks), the optimiser's arguments are asked for again whenever its
hyperparameters changed (a schedule takes effect) or they follow the step
(``Optimiser.stepwise``), the cost is checked between forward and backward,
the optimiser's counters move as in ``Optimiser.step``. A replay opens no
buffer session: the recording owns its buffers (``Handler.detach_session``),
and what the handler makes between replays (the held-out evaluation, what
hooks read) belongs to no session, so it is freed when dropped, however many
steps are replayed. A device handler
replays in its own way: its kernels' ``capture(recording, calls)`` gives what
each replay runs (the ``cuda`` handler's CUDA graph, :mod:`sigma_cuda.graphs`);
it raises :class:`NotReplayable` to decline.

A plugin optimiser that overrides ``update`` with handler ops is replayed like
the rest of the step when its class sets ``stepwise = False`` (its update does
not read the step count, which a replay would not change); its recorded calls
hold its hyperparameters, so a step after a schedule changed one is recorded
anew. A step that reads data to the host (data-dependent control flow), keeps an
array across steps, has a layer with ``replayable = False``, an optimiser
that overrides ``step``, or one whose ``update`` may read the step count, or runs
on a handler with arrays off the host and no ``capture``, is not replayed: the
reason is logged once, such steps run normally. The first step of a signature runs normally (lazy state is made
then), the second is recorded; the cache holds :data:`CACHE_SIZE` recordings.

A backend's kernels (and their ``updates``) may offer *launches*, which the core does not know of: a method
``launch(name, args, kwargs, result)`` that returns the call ``name(*args, **kwargs)`` just recorded (it
returned ``result``) as a function of no arguments repeating it on the same buffers, its checks made and its
arguments resolved once, or None to decline. What changes between calls (a generator's counter) it reads as
it runs; an update rule's launch is a function of the rule's hyperparameters (keywords) that returns the
launch. ``sigma_cpu``'s kernels offer them for their compiled passes.
"""

from __future__ import annotations

import collections
import functools
import logging
import operator

import numpy

from sigma_core import ArrayKernels, Handler, Layer, Optimiser, SigmaError

log = logging.getLogger("sigma")

CACHE_SIZE = 4
#: A batch section the handler adopted without a copy, up to this size, is copied into a buffer of the recording
#: instead of being bound in each replay: the kernels reading it can then be launches (module docstring).
COPY_MAX = 1 << 16
#: Kernels that only compute from their arguments, never touching buffers: not recorded.
PURE = frozenset({"normalise_axes"})
#: Kernels that may return a view of their arguments: a replay skips them when they did.
VIEWS = frozenset({"reshape", "transpose", "getitem", "activation_backward", "sum_to_shape"})
#: Reference kernels that are one array-module function into a new buffer.
UFUNCS = frozenset({"add", "subtract", "multiply", "divide", "power", "maximum", "negative", "exp", "log", "sqrt",
                    "abs", "sign", "tanh"})


class NotReplayable(Exception):
    """Raised inside a recording to abandon it; the step itself completes normally."""


def _root(a, arrays=numpy.ndarray):
    """The array owning ``a``'s memory; ``arrays``: the handler's array types."""
    while isinstance(getattr(a, "base", None), arrays):
        a = a.base
    return a


def _arrays(result, arrays) -> bool:
    """Whether a kernel's result is arrays only (a value read to the host is not)."""
    return result is None or isinstance(result, arrays) or isinstance(result, tuple) and all(
        _arrays(r, arrays) for r in result)


def _address(a) -> int:
    return a.__array_interface__["data"][0]


class ReplayPool:
    """Stands in for the buffer pool during a replay: the recorded buffers, in recorded order."""

    def __init__(self, buffers):
        self.buffers, self.next = buffers, 0

    def empty(self, shape, dtype):
        buffer = self.buffers[self.next]
        self.next += 1
        if buffer.shape != shape:
            raise SigmaError(f"replay: a kernel asked for a {shape} buffer where the recording had {buffer.shape}; "
                             'set training.compile = "none" and report this')
        return buffer


class _Proxy:
    """The kernels (or their ``updates``) as seen while recording."""

    def __init__(self, recorder, target, part=""):
        self._recorder, self._target, self._part = recorder, target, part

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if name == "updates":
            return _Proxy(self._recorder, value, name)
        if not callable(value) or name in PURE or name.startswith("_") or isinstance(value, type):
            return value
        recorder = self._recorder

        def call(*args, **kwargs):
            return recorder.call(self._part, name, value, args, kwargs)

        return call


class Recorder:
    """Records one step's kernel calls on ``handler``: ``with Recorder(h, batch) as r: <a normal step>``.

    It is the recorder of ``Handler.record``: the handler's kernels are a stand-in that keeps each call
    (:meth:`call`), and the handler tells it of checks to repeat (:meth:`check`) and of what a replay could
    not repeat (:meth:`refuse`).
    """

    def __init__(self, handler, batch: dict):
        self.handler, self.kernels = handler, handler.kernels
        self.arrays = (numpy.ndarray, self.kernels.xp.ndarray)  # the host's and the handler's array types
        self.batch = {id(v): key for key, v in batch.items()}
        self.calls = []  # [part, name, fn, args, kwargs, new buffers, result]
        self.inputs = {}  # batch key -> raw adopted
        self.mark = None  # index of the cost check in calls
        self.reason = None if len(self.batch) == len(batch) else "two batch sections are one array"
        self.paused = False

    def __enter__(self):
        self._watching = self.handler.record(self, _Proxy(self, self.kernels))
        return self._watching.__enter__()

    def __exit__(self, *exc_info):
        return self._watching.__exit__(*exc_info)

    def refuse(self, reason: str):
        """The step cannot be replayed, for ``reason`` (the first one given is kept)."""
        if self.reason is None:
            self.reason = reason

    def call(self, part, name, fn, args, kwargs):
        if self.paused:
            return fn(*args, **kwargs)
        pool = self.kernels.pool
        start = pool.handed_out
        result = fn(*args, **kwargs)
        new = pool.handed_out_since(start)
        if name == "adopt" and id(args[0]) in self.batch:
            self.inputs[self.batch[id(args[0])]] = (result, result is args[0])
        elif name == "all_finite" and self.mark is None:
            self.mark = len(self.calls)
        elif name in ("to_host", "asarray", "adopt", "all_finite", "label_range") or not _arrays(result, self.arrays):
            self.refuse(f"the step moves data between the host and the handler ({name}): "
                        "what it does may depend on the data")
        else:
            self.calls.append([part, name, fn, args, kwargs, new, result])
        return result

    def check(self, fn, *args):
        """Run ``fn(*args)``, a host-side check of the data (it raises on bad data), now and on every replay."""
        self.paused = True
        try:
            fn(*args)
        finally:
            self.paused = False
        self.calls.append(["check", fn.__name__, fn, args, {}, [], None])


class _CopyBack:
    """A recorded call whose result is not a pool buffer (made afresh by the kernel): copied into the recorded one."""

    def __init__(self, fn, results):
        self.fn, self.results = fn, results

    def __call__(self, *args, **kwargs):
        result = self.fn(*args, **kwargs)
        for recorded, new in zip(self.results, result if isinstance(result, tuple) else (result,)):
            if recorded is not None:
                recorded[...] = new


class Recording:
    """One recorded step of a trainer, ready to replay; built from a finished :class:`Recorder`.

    A device handler's own replay (``kernels.capture(recording, calls)``) takes from it what it needs of this
    plugin, so that no backend imports it: :meth:`replay_pool` and :attr:`declined`."""

    #: What a handler's ``capture`` raises to decline: the step is then replayed call by call (or run as written).
    declined = NotReplayable

    def __init__(self, trainer, recorder: Recorder, cost):
        self.trainer, self.cost = trainer, cost
        opt, kernels = trainer.optimiser, recorder.kernels
        capture = getattr(kernels, "capture", None)  # a device handler's own replay (module docstring)
        if kernels.xp is not numpy and capture is None:
            raise NotReplayable(f"handler {trainer.handler.name!r} keeps its arrays off the host")
        if type(opt).step is not Optimiser.step:
            raise NotReplayable(f"optimiser {type(opt).__name__} overrides step(), which may do anything per step")
        #: A plugin optimiser whose update() is written in handler ops: its kernel calls are recorded like the
        #: rest of the step, with its hyperparameters (and the step count, were it read) as they were then.
        self.custom = type(opt).update is not Optimiser.update
        if self.custom and opt.stepwise:
            raise NotReplayable(f"optimiser {type(opt).__name__}'s update() may read the step count (its class "
                                "does not set stepwise = False), which a replay of its kernel calls would not change")
        if opt.publish_updates:
            raise NotReplayable("a hook reads the optimiser's updates")
        for name, layer in trainer.network.layers.items():
            if not isinstance(layer, Layer):  # an attribute set on it would not change the network's version
                raise NotReplayable(f"layer {name!r} is not a sigma_core.Layer")
            if not getattr(layer, "replayable", True):  # its Python code decides something anew each step
                raise NotReplayable(f"layer {name!r} says it cannot be replayed")
        if recorder.reason:
            raise NotReplayable(recorder.reason)
        if recorder.mark is None:
            raise NotReplayable("the step did not check its cost")
        self.records, self.arrays, self.mark = recorder.calls, recorder.arrays, recorder.mark
        # batch keys whose recorded buffer a replay copies into; the others were adopted without a copy
        self.copied = {key: raw for key, (raw, adopted) in recorder.inputs.items() if not adopted}
        self.adopted = {key: raw for key, (raw, adopted) in recorder.inputs.items() if adopted}
        owned = {id(b) for record in self.records for b in record[5]}
        trainable = trainer.trainable_parameters
        self.ids = trainer.optimiser.trainable(trainable)
        self.frozen = [i for i in trainable if i not in set(self.ids)]
        calls = [_call(kernels, record, owned) for record in self.records]
        # what the kernels still run as methods ask the pool for, in order
        self.forms = [_form(record, call) for record, call in zip(self.records, calls)]  # for ``sigma explain``
        self.updates = [] if self.custom else self._updates(calls)
        self.patches = self._patches(calls)
        own = {key: raw.copy() for key, raw in self.adopted.items()
               if raw.nbytes <= COPY_MAX and raw.flags.c_contiguous}
        if own:  # bound once, in the calls and (for ``sigma explain``) the records
            records = [[None, list(record[3]), record[4]] for record in self.records]
            _bind([p for p in self._patches(records) + self.patches if p[3] in own], own)
            for record, bound in zip(self.records, records):
                record[3] = bound[1]
            self.patches = [p for p in self.patches if p[3] not in own]
            self.copied.update(own)
            self.adopted = {key: raw for key, raw in self.adopted.items() if key not in own}
        patched = {id(patch[0]) for patch in self.patches}  # a launch binds its arguments: none from the batch
        for i, (record, call) in enumerate(zip(self.records, calls)):
            if self.forms[i] == "kernel" and id(call[1]) not in patched and id(call[2]) not in patched:
                owner = getattr(record[2], "__self__", None)  # a reference update rule is a partial: no owner
                launch = getattr(owner, "launch", None)  # a backend's offer (module docstring), or none
                launch = launch and launch(record[1], record[3], record[4], record[6])
                if launch is not None:  # an update's launch is bound to the prologue's hyperparameters
                    call[:], self.forms[i] = [launch, [], call[2] if record[0] == "updates" else {}], "launch"
        self.buffers = [b for record, form in zip(self.records, self.forms) if form in ("kernel", "copy back")
                        for b in record[5]]
        self.captured = capture(self, calls) if capture else None  # calls: one per record, None where skipped
        h = trainer.handler  # the cost check as the handler makes it, its kernel bound to the cost
        self.finite = functools.partial(kernels.all_finite, cost.data) if type(h).all_finite is Handler.all_finite \
            else functools.partial(h.all_finite, cost)
        # The hyperparameters the updates' arguments were made from; what a replay on the host calls before and
        # after the cost check, as functions of no arguments: a call reading a batch bound anew reads its lists
        # when run, the updates (at ``rebind``) are bound by the prologue.
        self.hyperparameters = operator.attrgetter("learning_rate", "weight_decay", *opt.hyperparameters())
        self.values, self.run_calls, self.rebind = None, ([], []), []
        if self.custom:  # what its recorded update calls were made with: see current()
            self.values = self.hyperparameters(opt)
        updates = {id(c) for u in self.updates for c in u[1:] if c}
        for i, call in enumerate(calls if self.captured is None else ()):
            if call is None:
                continue
            run, reads = self.run_calls[i >= self.mark], id(call[1]) in patched or id(call[2]) in patched
            rebound = id(call) in updates and not reads  # an update launch binds itself
            if rebound:
                self.rebind.append((run, len(run), call, self.forms[i] == "launch"))
            run.append(None if rebound else _bound(call, reads))

    # -- building --------------------------------------------------------------------------
    def _patches(self, calls) -> list:
        """(arguments, position or key, index in a tuple there or None, batch key, view) for every replayed
        argument made from the batch: a replay puts the new batch (or the same view of it) there."""
        patches, roots = [], collections.defaultdict(list)  # sections may be views of one array
        for key, raw in self.adopted.items():
            roots[id(_root(raw))].append((key, raw))
        for call, record in zip(calls, self.records):
            for container in call[1:] if call else ():
                for where, value in (enumerate(container) if isinstance(container, list) else container.items()):
                    inner = enumerate(value) if isinstance(value, tuple) else ((None, value),)
                    for index, a in inner:
                        if not isinstance(a, numpy.ndarray) or id(_root(a)) not in roots:
                            continue
                        inside = [(key, raw, _address(a) - _address(raw)) for key, raw in roots[id(_root(a))]
                                  if 0 <= _address(a) - _address(raw) < max(raw.nbytes, 1)]
                        if len(inside) != 1:
                            raise NotReplayable(f"kernel {record[1]} reads memory next to the batch")
                        key, raw, offset = inside[0]
                        patches.append((container, where, index, key, None if a is raw else (a.shape, a.strides, offset)))
        return patches

    def _updates(self, calls) -> list:
        """(parameter id, rule call, l2 call or None) per trainable parameter, in the optimiser's order."""
        params, updates, l2, ids = self.trainer.trainable_parameters, [], None, iter(self.ids)
        for record, call in zip(self.records, calls):
            if record[0] != "updates":
                continue
            if record[1] == "l2_gradient":
                l2 = call
                continue
            pid = next(ids, None)
            if pid is None or record[3][0] is not params[pid].data:
                raise NotReplayable("the optimiser's updates do not follow its parameters")
            updates.append((pid, call, l2))
            l2 = None
        if next(ids, None) is not None:
            raise NotReplayable("a trainable parameter had no update")
        return updates

    # -- replaying ---------------------------------------------------------------------------
    def current(self) -> bool:
        """Whether a replay gives the bits of a normal step now: a plugin optimiser's recorded update calls hold
        its hyperparameters as they were when it was recorded (a schedule may have changed them since)."""
        return not self.custom or self.hyperparameters(self.trainer.optimiser) == self.values

    def replay_pool(self) -> ReplayPool:
        """A pool that hands out this recording's buffers in recorded order, for a capture to run the calls on."""
        return ReplayPool(self.buffers)

    def replay(self, batch: dict):
        """Run the recorded step on ``batch``; returns the cost (the recorded handler number)."""
        if self.captured is not None:
            return self.captured.replay(batch)
        t = self.trainer
        kernels = t.handler.kernels
        forward, backward = self.run_calls
        for key, raw in self.copied.items():
            raw[...] = batch[key]
        if self.patches:
            _bind(self.patches, {key: kernels.adopt(batch[key]) for key in self.adopted})
        pool = kernels.pool
        if self.buffers:  # some calls still run as kernels, asking the pool for their recorded buffers
            kernels.pool = ReplayPool(self.buffers)
        try:
            for call in forward:
                call()
            if not self.finite():
                t.check_cost(self.cost)  # raises
            self.optimiser_prologue()
            for call in backward:
                call()
        finally:
            kernels.pool = pool
        return self.cost

    def optimiser_prologue(self):
        """What ``Optimiser.step`` does besides the arithmetic (its counts and published values); the updates
        bound to this step's arguments where those may have changed. A handler's ``capture`` calls it too."""
        opt = self.trainer.optimiser
        counts = opt.count_step(self.ids, list(self.frozen))
        values = self.hyperparameters(opt)
        if opt.stepwise or values != self.values:
            self.values = values
            for pid, call, l2 in self.updates:
                call[2] = opt.arguments(counts[pid])
                if l2 is not None:
                    l2[1][2] = opt.weight_decay
            for run, i, call, launch in self.rebind:
                run[i] = call[0](**call[2]) if launch else _bound(call, False)


def _bind(patches, raws: dict):
    """Put the batch sections ``raws`` (or the recorded views of them) where ``patches`` say."""
    for container, where, index, key, view in patches:
        raw = raws[key]
        if view is not None:
            raw = numpy.ndarray(view[0], raw.dtype, raw, view[2], view[1])
        if index is None:
            container[where] = raw
        else:  # inside a tuple argument
            container[where] = (*container[where][:index], raw, *container[where][index + 1:])


def _bound(call, changing: bool):
    """``call`` as a function of no arguments; one whose lists may change reads them when run."""
    fn, args, kwargs = call
    if changing:
        return lambda: fn(*args, **call[2])
    return functools.partial(fn, *args, **kwargs) if args or kwargs else fn


def _form(record, call) -> str:
    """How a replay runs a record."""
    if call is None:
        return "skipped"
    if record[0] == "check":
        return "check"
    return "copy back" if isinstance(call[0], _CopyBack) else "kernel" if call[0] is record[2] else "array module"


def _call(kernels, record, owned):
    """A record as the call a replay makes, ``[function, positional list, keyword dict]``, or None when the
    replay can skip it (a view of recorded buffers: later calls hold the recorded view).

    The reference matmul and elementwise kernels run as the array module's function into the recorded output
    (what they do, without their checks); a kernel that returns memory of its own making (not from the pool)
    gets its result copied into the recorded one (:class:`_CopyBack`).
    """
    part, name, fn, args, kwargs, new, result = record
    arrays = (numpy.ndarray, kernels.xp.ndarray)
    sources = {id(_root(a, arrays)) for a in (*args, *kwargs.values()) if isinstance(a, arrays)}
    results = result if isinstance(result, tuple) else (result,)
    fresh = [r if isinstance(r, arrays) and id(_root(r, arrays)) not in owned and id(_root(r, arrays)) not in sources
             else None for r in results]
    if not new and name in VIEWS and not any(r is not None for r in fresh):
        return None
    function = getattr(fn, "__func__", None)
    if not part and len(new) == 1 and result is new[0] and not kwargs and function is getattr(ArrayKernels, name, 0):
        if name == "matmul" or name in UFUNCS:
            return [getattr(kernels.xp, name), list(args), {"out": result}]
        if name == "full":
            return [result.fill, [args[1]], {}]
    if any(r is not None for r in fresh):
        fn = _CopyBack(fn, fresh)
    return [fn, list(args), dict(kwargs)]


class StepReplay:
    """A trainer's recorded steps, by signature (bounded, least recently used out): the ``replay`` step compiler.

    ``trainer.compile_step(StepReplay.compile)`` makes one, and the trainer then runs each step with its
    :meth:`run`; :meth:`of` finds it again.
    """

    def __init__(self, trainer, size: int = CACHE_SIZE):
        self.trainer, self.size = trainer, size
        self.cache = collections.OrderedDict()  # signature -> Recording, or a reason it cannot be replayed, or None (seen once)
        self.refused = set()  # reasons already logged
        self.last = None  # the latest Recording (for ``sigma explain``)
        self.replayed = 0  # steps replayed so far
        self.key = self.entry = None  # the latest signature and its entry (the one stored last)

    @classmethod
    def compile(cls, trainer):
        """The step compiler (``Trainer.compile_step``): a new StepReplay's :meth:`run`. A bound method, not the
        instance made callable: a call through ``__call__`` costs about 0.1 µs more, a step."""
        return cls(trainer).run

    @staticmethod
    def of(trainer):
        """The StepReplay that runs ``trainer``'s steps, or None when another compiler or none does."""
        replay = getattr(trainer.compiled_step, "__self__", None)
        return replay if isinstance(replay, StepReplay) else None

    def signature(self, batch: dict) -> tuple:
        """The batch's shapes and dtypes, what the optimiser's structure depends on, and the versions of the
        trainer (its trainable set), network (parameters, layers), optimiser (memory, freeze filters) and
        handler (shared buffers): a changed one is a new signature."""
        t = self.trainer
        opt, network = t.optimiser, t.network
        try:
            shapes = tuple([(key, v.shape, v.dtype) for key, v in batch.items()])
        except AttributeError:  # not all arrays
            shapes = tuple([(key, numpy.shape(v), getattr(v, "dtype", None)) for key, v in batch.items()])
        return (t.version, network.version, opt.version, t.handler.version, network, opt, bool(opt.weight_decay),
                opt.publish_updates, shapes)

    def run(self, batch: dict):
        """One training step on ``batch``, replayed when it can be; returns the cost."""
        t = self.trainer
        key = self.signature(batch)
        if key != self.key:
            self.key, self.entry = key, self.cache.get(key, False)
            if self.entry is not False:
                self.cache.move_to_end(key)
        entry = self.entry
        if entry.__class__ is Recording:
            if entry.current():
                self.replayed += 1
                return entry.replay(batch)
            entry = None  # recorded with other hyperparameters: recorded anew below
        if entry is not None:  # first sighting (the step makes lazy state), or known not replayable: a normal step
            if entry is False:
                self._store(key, None)
            return t.training_step(batch)
        h = t.handler
        with Recorder(h, batch) as recorder:
            cost = t.training_step(batch)
        try:
            recording = Recording(t, recorder, cost)
        except NotReplayable as reason:
            self._store(key, str(reason))
            if str(reason) not in self.refused:
                self.refused.add(str(reason))
                log.info("trainer %s: training steps are not replayed (%s); they run normally", t.name, reason)
            return cost
        h.detach_session(cost)  # the recording owns the step's buffers and its cost now
        self._store(key, recording)
        self.last = recording
        return cost

    def _store(self, key, entry):
        self.cache[key] = self.entry = entry
        self.cache.move_to_end(key)
        while len(self.cache) > self.size:
            self.cache.popitem(last=False)

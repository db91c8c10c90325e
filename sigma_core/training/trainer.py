"""Trainer: one network, its optimiser, its data, the training step, evaluation and the counters checkpoints save.

The cost stays a handler number, summed over the epoch on the handler and read to the host only when asked
(:attr:`Trainer.last_cost`, the epoch mean), so a step never waits for the device.
"""

import logging

import numpy

from sigma_core.errors import NonFiniteError, SigmaError, first_non_finite

log = logging.getLogger("sigma")


class Trainer:
    """Owns network, optimiser, initialisers, training and named validation iterators."""

    def __init__(self, network, optimiser, training_iterator, *, validation: dict | None = None,
                 initialisers: dict | None = None, name: str = "trainer", inputs: str = "inputs",
                 targets: str = "targets"):
        self.name = name
        self.network = network
        self.optimiser = optimiser
        self.training_iterator = training_iterator
        self.validation = dict(validation or {})
        self.initialisers = dict(initialisers or {})
        self.inputs_external = inputs
        self.targets_external = targets
        self.handler = None
        self.epoch = 0
        self.iteration = 0  # iterations in the current epoch
        self.total_iterations = 0
        self._costs = None  # (last cost, sum of this epoch's costs): float64 numbers on the handler
        self.in_epoch = False  # True between an epoch's start and its end: the next open_epoch continues it
        self._trainable = {}  # id -> NDArray of the parameters the optimiser may change
        self._trainable_ids = []  # its keys and values as lists, built once, not on every step
        self._trainable_arrays = []
        self._initial = None  # (handler RNG state, optimiser state) from before initialise, for reset()
        self._evaluation = None  # (key, (ranks, cost)) of the last evaluate() pass
        #: Bumped whenever the trainable set is read anew (:meth:`refresh_trainable`: initialise, reset, restore);
        #: with the network's, optimiser's and handler's versions, what a compiled step compares to know it still
        #: holds, and what keeps an evaluation (:meth:`evaluate`).
        self.version = 0
        #: What each training iteration runs: :meth:`training_step`, or a compiler's (:meth:`compile_step`).
        self.compiled_step = self.training_step

    # -- set-up --------------------------------------------------------------------------
    def initialise(self, handler):
        """Instantiate the network's parameters on ``handler`` and apply the initialisers."""
        self.handler = handler
        self._costs = _cost_numbers(handler)
        self._initial = (handler.rng_state(), self.optimiser.state_dict())
        self._initialise_parameters()

    def _initialise_parameters(self):
        self.network.initialise(self.handler, self.initialisers)
        for array in self.network.parameters.values():  # parameters must outlive every session
            self.handler.keep(array)
        self.refresh_trainable()

    def reset(self):
        """Back to where :meth:`initialise` left the trainer, the random generator rewound: the same initial
        parameters, and a run that repeats the first bit for bit."""
        if self._initial is None:
            raise SigmaError(f"trainer {self.name!r} is not initialised; call trainer.initialise(handler) first")
        rng, optimiser = self._initial
        self.handler.set_rng_state(rng)
        self._initialise_parameters()
        self.optimiser.load_state_dict(optimiser, self.handler)
        self.epoch = self.iteration = self.total_iterations = 0
        self.last_cost, self.epoch_cost = float("nan"), 0.0
        self.in_epoch = False
        for iterator in (self.training_iterator, *self.validation.values()):
            iterator.set_epoch(0)

    @property
    def last_cost(self) -> float:
        """The latest iteration's cost (NaN before the first), read from the handler now."""
        return float(self._costs[0]) if self._costs else float("nan")

    @last_cost.setter
    def last_cost(self, value: float):
        self.handler.fill(self._costs[0], value)

    @property
    def epoch_cost(self) -> float:
        """The sum of this epoch's iteration costs so far, read from the handler now."""
        return float(self._costs[1]) if self._costs else 0.0

    @epoch_cost.setter
    def epoch_cost(self, value: float):
        self.handler.fill(self._costs[1], value)

    def refresh_trainable(self):
        """Re-read which parameters the optimiser may change (after freezing or a reload)."""
        params = self.network.parameters
        self._trainable = {pid: params[pid] for pid in self.optimiser.trainable(list(params))}
        self._trainable_ids = list(self._trainable)
        self._trainable_arrays = list(self._trainable.values())
        self.version += 1  # a compiled step updates the set it was compiled with

    @property
    def trainable_parameters(self) -> dict:
        """The parameters the optimiser may change, by id (as of the last :meth:`refresh_trainable`)."""
        return self._trainable

    def compile_step(self, compiler) -> None:
        """Later training steps run as ``compiler(trainer)`` makes them (None: :meth:`training_step`).

        It returns a function of a batch that does what :meth:`training_step` does, the same bits, faster
        (sigmann-replay replays a recorded step), calling :meth:`training_step` where it cannot do better, and
        noticing changes by the ``version`` of the trainer, network, optimiser and handler (``training.compile``).
        """
        self.compiled_step = self.training_step if compiler is None else compiler(self)

    # -- the training step -----------------------------------------------------------------
    def _externals(self, batch: dict) -> dict:
        h = self.handler
        externals = {self.inputs_external: h.adopt(batch["inputs"])}
        if "targets" in batch:
            externals[self.targets_external] = h.adopt(batch["targets"])
        return externals

    def run_iteration(self, batch: dict):
        """One optimisation step on ``batch`` (as compiled: :attr:`compiled_step`), counted; returns its cost, a
        handler number readable until the next step."""
        return self.count_iteration(self.compiled_step(batch))

    def training_step(self, batch: dict):
        """One optimisation step on ``batch``, as written: a buffer session, the gradients, the update. Returns
        the cost, not counted (:meth:`run_iteration` counts); what a step compiler starts from."""
        h = self.handler
        h.begin_session()
        try:
            cost, grads = self.gradients(batch)
            self.optimiser.step(h, self._trainable, grads)
        finally:
            h.end_session()
        return cost

    def gradients(self, batch: dict):
        """``(cost, {id: gradient})`` of the trainable parameters on ``batch``, inside the caller's session; a
        non-finite cost raises before any gradient is taken, so a bad step changes no parameter."""
        h = self.handler
        externals = self._externals(batch)
        with h.tape() as tape:
            tape.watch(*self._trainable_arrays)
            result = self.network.forward(externals, training=True)
            if result.cost is None:
                raise SigmaError(f"trainer {self.name!r}: the network has no cost layer, so there is nothing to "
                                 "optimise")
            cost = result.cost
            self.check_cost(cost)
            grads = tape.gradient(cost, self._trainable_arrays)
        return cost, dict(zip(self._trainable_ids, grads))

    def check_cost(self, cost):
        """Raise :class:`NonFiniteError` if the step's ``cost`` (a handler number) is not finite; a compiled
        step calls it where :meth:`training_step` does, between forward and backward."""
        if not self.handler.all_finite(cost):
            raise NonFiniteError(f"trainer {self.name!r}: cost became {float(cost)} at epoch {self.epoch + 1}, "
                                 f"iteration {self.iteration + 1}")

    def apply_gradients(self, grads: dict, cost: float) -> float:
        """One step from gradients computed elsewhere (data-parallel workers: host arrays by id); returns ``cost``,
        not counted (the loop counts: :meth:`train_batch`)."""
        h = self.handler
        with h.session():
            self.optimiser.step(h, self._trainable, {pid: h.adopt(grad) for pid, grad in grads.items()})
        return cost

    def count_iteration(self, cost):
        """Record one finished step and its cost (a handler number or a float)."""
        self.handler.fill(self._costs[0], cost)
        self.iteration += 1
        self.total_iterations += 1
        return cost

    def replica(self, handler, name: str) -> "Trainer":
        """A data-parallel worker's trainer: copies of this network and optimiser state on ``handler``, no data."""
        optimiser = type(self.optimiser)(**self.optimiser.hyperparameters())
        optimiser.load_state_dict(self.optimiser.state_dict(), handler)
        twin = Trainer(self.network.copy(handler), optimiser, None, name=name, inputs=self.inputs_external,
                       targets=self.targets_external)
        twin.handler = handler
        twin._costs = _cost_numbers(handler)
        twin.refresh_trainable()
        return twin

    # -- epochs (the loop's, or run_epoch's) ---------------------------------------------------------------
    def open_epoch(self):
        """The batches left in the current epoch, which starts anew unless one is open: an interrupted epoch (a
        stop, a mid-epoch checkpoint restored) is finished, its iterator and counts carrying on where they were."""
        batches = self.training_iterator
        if self.in_epoch:
            # A checkpoint taken on an epoch's last batch: the iterator has already rolled
            # over to the next epoch, so iterating it would train that one as this one.
            if self.iteration >= len(self.training_iterator):
                batches = ()
        else:
            self.iteration, self.epoch_cost = 0, 0.0
        self.in_epoch = True
        return batches

    def train_batch(self, batch: dict, step=None):
        """One iteration on ``batch`` by ``step(batch)`` (a :class:`~sigma_core.training.loop.Operator`'s; default
        :attr:`compiled_step`), counted here, its cost added to the epoch's; a non-finite cost's error says where
        it came from."""
        try:
            cost = (step or self.compiled_step)(batch)
        except NonFiniteError as error:
            raise NonFiniteError(f"{error}; {self._non_finite_source(batch)}") from None
        self.count_iteration(cost)
        self.handler.add_(self._costs[1], cost)
        return cost

    def close_epoch(self) -> float:
        """End the open epoch; returns its mean cost."""
        self.in_epoch = False
        self.epoch += 1
        return self.epoch_cost / max(self.iteration, 1)

    def run_epoch(self, on_iteration=None) -> float:
        """Train one epoch with the trainer's own step, calling ``on_iteration(trainer)`` after each iteration;
        returns the mean cost. For scripts: a run's epochs, with hooks and commands, are the Loop's."""
        for batch in self.open_epoch():
            self.train_batch(batch)
            if on_iteration is not None:
                on_iteration(self)
        return self.close_epoch()

    def _non_finite_source(self, batch: dict) -> str:
        """Where a non-finite cost comes from: a value of the batch, else the first bad parameter (both
        unchanged: the cost is checked before the update). Only called once the check failed."""
        for section, values in batch.items():
            values = numpy.asarray(values)
            if numpy.issubdtype(values.dtype, numpy.number) and not numpy.isfinite(values).all():
                return f"the batch's {section!r} hold {first_non_finite(values)}"
        for parameter_id, array in self.network.parameters.items():
            if not self.handler.all_finite(array):
                return f"parameter {parameter_id!r} holds {first_non_finite(array.to_numpy())}"
        largest = max(((float(numpy.abs(a.to_numpy()).max(initial=0)), pid)
                       for pid, a in self.network.parameters.items()), default=(0.0, "none"))
        return (f"the network overflowed {self.handler.dtype} computing it (parameters have grown to "
                f"{largest[0]:.3g}, in {largest[1]!r}); lower the learning rate")

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Counters, iterator positions and the RNG state, JSON-ready: with the parameters and the optimiser's
        state (saved by :mod:`sigma_core.training.checkpoint`), all a resumed run needs to continue bit for bit."""
        return {**{name: getattr(self, name) for name in COUNTERS},
                "training_iterator": self.training_iterator.state(),
                "validation_iterators": {name: it.state() for name, it in self.validation.items()},
                "rng": {"handler": self.handler.name, "state": self.handler.rng_state()}}

    def load_state_dict(self, state: dict):
        """Restore :meth:`state_dict` output; an interrupted epoch continues on the next :meth:`run_epoch`.
        The RNG state only loads on a handler of the same name (another's generator may differ)."""
        unknown = sorted(set(state["validation_iterators"]) - set(self.validation))
        if unknown:
            raise SigmaError(f"trainer {self.name!r}: state has validation iterator(s) {unknown} it does not have")
        for name, kind in COUNTERS.items():
            setattr(self, name, kind(state[name]))
        self.training_iterator.set_state(state["training_iterator"])
        for name, iterator_state in state["validation_iterators"].items():
            self.validation[name].set_state(iterator_state)
        rng = state["rng"]
        if rng["handler"] == self.handler.name:
            self.handler.set_rng_state(rng["state"])
        else:
            log.warning("trainer %s: RNG state is from handler %r, not %r; random numbers restart from the seed",
                        self.name, rng["handler"], self.handler.name)

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, iterator, top: tuple = (1,), threshold: float = 0.5) -> dict:
        """Cost and top-k accuracy over one pass of ``iterator``, in inference mode.

        One output is a binary classifier: a hit when ``output > threshold`` agrees with ``target > 0.5``. The
        ranks are kept until the next step, initialisation or restore, so evaluations at the same moment share
        one pass (parameters changed by hand in between are not noticed). It runs outside every buffer session,
        its arrays freed batch by batch, so a long run's evaluations keep nothing.
        """
        key = (id(iterator), self.total_iterations, self.version, threshold)
        if self._evaluation is None or self._evaluation[0] != key:
            self._evaluation = (key, self._rank_targets(iterator, threshold))
        ranks, cost = self._evaluation[1]
        rows = max(ranks.size, 1)
        report = {f"top{k}": int((ranks < k).sum()) / rows for k in top}
        report.update(accuracy=report.get("top1", report[f"top{top[0]}"]), cost=cost, records=int(ranks.size))
        return report

    def _rank_targets(self, iterator, threshold: float):
        """Per record, the rank of its target among the predicted classes (0 = top); and the mean cost."""
        h = self.handler
        ranks, cost_sum = [], 0.0
        for batch in iterator:
            with h.no_grad():
                result = self.network.forward(self._externals(batch), training=False)
            predictions = result.outputs["predictions"].to_numpy()
            predictions = predictions.reshape(-1, predictions.shape[-1])
            labels = numpy.asarray(batch["targets"])
            # one-hot rows are float; integer (N, T) targets are class indices
            one_hot = labels.dtype.kind == "f" and labels.ndim > 1 and labels.shape[-1] > 1
            labels = labels.argmax(-1).reshape(-1) if one_hot else labels.reshape(-1)
            if result.cost is not None:
                cost_sum += float(result.cost) * predictions.shape[0]
            if predictions.shape[1] == 1:  # one output: binary, thresholded
                predictions = numpy.concatenate([threshold - predictions, predictions - threshold], axis=1)
                labels = (labels > 0.5).astype(numpy.int64)
            if labels.shape[0] != predictions.shape[0]:
                raise SigmaError(f"trainer {self.name!r}: {labels.shape[0]} targets for {predictions.shape[0]} "
                                 "predictions")
            order = numpy.argsort(-predictions, axis=1, kind="stable")
            ranks.append(numpy.argmax(order == labels[:, None], axis=1))
        ranks = numpy.concatenate(ranks) if ranks else numpy.zeros(0, dtype=numpy.int64)
        return ranks, cost_sum / max(ranks.size, 1)


#: The counters a checkpoint saves, and their types.
COUNTERS = {"epoch": int, "iteration": int, "total_iterations": int, "last_cost": float, "epoch_cost": float,
            "in_epoch": bool}


def _cost_numbers(handler) -> tuple:
    """(last cost, epoch cost sum): float64 numbers on the handler, so steps never read them to the host."""
    return handler.number(float("nan"), dtype="float64"), handler.number(0.0, dtype="float64")

"""Trainer: one network, its optimiser, its data, and the training step.

A training iteration, as in Sigma: begin a buffer session, copy the batch into
the handler, run the network forward under a tape watching the trainable
parameters, take the gradients, let the optimiser update the parameters in
place, end the session. The session makes every iteration after the first
reuse the previous iteration's buffers.

The cost stays a handler number: the trainer copies it into a number it keeps
and adds it to the epoch's sum, both on the handler, and reads it to the host
only when asked (:attr:`Trainer.last_cost`, :attr:`Trainer.epoch_cost`, the
epoch mean). The one check made every step, that the cost is finite before the
update, is :meth:`Handler.all_finite`, so a device handler decides what it costs.
"""

from __future__ import annotations

import logging

import numpy

from .errors import NonFiniteError, SigmaError

log = logging.getLogger("sigma")


class Trainer:
    """Owns network, optimiser, initialisers, training and named validation iterators."""

    def __init__(
        self,
        network,
        optimiser,
        training_iterator,
        *,
        validation: dict | None = None,
        initialisers: dict | None = None,
        name: str = "trainer",
        inputs: str = "inputs",
        targets: str = "targets",
        run_config: dict | None = None,
    ):
        self.name = name
        #: The validated run file this trainer was built from (saved into checkpoints), if any.
        self.run_config = run_config
        self.network = network
        self.optimiser = optimiser
        self.training_iterator = training_iterator
        self.validation = dict(validation or {})
        self.initialisers = dict(initialisers or {})
        self.inputs_alias = inputs
        self.targets_alias = targets
        self.handler = None
        self.epoch = 0
        self.iteration = 0  # iterations in the current epoch
        self.total_iterations = 0
        self._costs = None  # (last cost, sum of this epoch's costs): float64 numbers on the handler
        self.in_epoch = False  # True between an epoch's start and its end: the next run_epoch continues it
        self._trainable = {}  # id -> NDArray of the parameters the optimiser may change
        self._trainable_ids = []  # its keys and values as lists, built once, not on every step
        self._trainable_arrays = []
        self._initial = None  # (handler RNG state, optimiser state) from before initialise, for reset()
        self._parameter_generation = 0  # bumped whenever parameters are replaced other than by training
        self._evaluation = None  # (key, (ranks, cost)) of the last evaluate() pass

    def add_validation(self, name: str, iterator):
        if name in self.validation:
            raise SigmaError(f"trainer {self.name!r} already has a validation iterator named {name!r}")
        self.validation[name] = iterator

    # -- set-up --------------------------------------------------------------------------
    def initialise(self, handler):
        """Instantiate the network's parameters on ``handler`` and apply the initialisers."""
        self.handler = handler
        self._costs = (handler.number(float("nan"), dtype="float64"), handler.number(0.0, dtype="float64"))
        self._initial = (handler.rng_state(), self.optimiser.state_dict())
        self._initialise_parameters()

    def _initialise_parameters(self):
        self.network.initialise(self.handler, self.initialisers)
        self._parameter_generation += 1
        # Once training has begun, arrays made between sessions expire at the next one, and
        # parameters must outlive every session.
        for array in self.network.parameters.values():
            self.handler.keep(array)
        self.refresh_trainable()

    def reset(self):
        """Back to where :meth:`initialise` left the trainer: the same initial parameters, epoch 0.

        The handler's random generator is rewound to its state before the
        first initialisation, so the initialisers draw the same values and a
        run after the reset repeats the first run bit for bit (dropout masks
        included). The optimiser loses its memory and gets its initial
        hyperparameters back; every iterator starts again at epoch 0.
        """
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

    # -- the training step -----------------------------------------------------------------
    def _externals(self, batch: dict) -> dict:
        h = self.handler
        externals = {self.inputs_alias: h.adopt(batch["inputs"])}
        if "targets" in batch:
            externals[self.targets_alias] = h.adopt(batch["targets"])
        return externals

    def run_iteration(self, batch: dict):
        """One optimisation step on ``batch``; returns its cost, a handler number readable until the next step.

        ``float()`` of it, or :attr:`last_cost`, reads it to the host.
        """
        h = self.handler
        h.begin_session()
        try:
            cost, grads = self.gradients(batch)
            self.optimiser.step(h, self._trainable, grads)
        finally:
            h.end_session()
        return self.count_iteration(cost)

    def gradients(self, batch: dict):
        """``(cost, {id: gradient})`` of the trainable parameters on ``batch``, inside the caller's session.

        A non-finite cost raises before any gradient is taken, so a bad step changes no parameter.
        """
        h = self.handler
        externals = self._externals(batch)
        with h.tape() as tape:
            tape.watch(*self._trainable_arrays)
            result = self.network.forward(externals, training=True)
            if result.cost is None:
                raise SigmaError(f"trainer {self.name!r}: the network has no cost layer, so there is nothing to optimise")
            cost = result.cost
            if not h.all_finite(cost):
                raise NonFiniteError(
                    f"trainer {self.name!r}: cost became {float(cost)} at epoch {self.epoch + 1}, "
                    f"iteration {self.iteration + 1}"
                )
            grads = tape.gradient(cost, self._trainable_arrays)
        return cost, dict(zip(self._trainable_ids, grads))

    def apply_gradients(self, grads: dict, cost: float) -> float:
        """One step from gradients computed elsewhere (data-parallel workers: host arrays by id); returns ``cost``."""
        h = self.handler
        with h.session():
            self.optimiser.step(h, self._trainable, {pid: h.adopt(grad) for pid, grad in grads.items()})
        return self.count_iteration(cost)

    def count_iteration(self, cost):
        """Record one finished step and its cost (a handler number or a float)."""
        self.handler.fill(self._costs[0], cost)
        self.iteration += 1
        self.total_iterations += 1
        return cost

    def replica(self, handler, name: str) -> Trainer:
        """A data-parallel worker's trainer: copies of this network and optimiser state on ``handler``, no data."""
        optimiser = type(self.optimiser)(**self.optimiser.hyperparameters())
        optimiser.load_state_dict(self.optimiser.state_dict(), handler)
        twin = Trainer(self.network.copy(handler), optimiser, None, name=name, inputs=self.inputs_alias,
                       targets=self.targets_alias)
        twin.handler = handler
        twin._costs = (handler.number(float("nan"), dtype="float64"), handler.number(0.0, dtype="float64"))
        twin.refresh_trainable()
        return twin

    def run_epoch(self, on_iteration=None, step=None) -> float:
        """Train on every batch of one epoch; returns the mean cost.

        An epoch that was interrupted (a stop mid-epoch, or a checkpoint taken
        mid-epoch and restored by :meth:`load_state_dict`) is finished instead
        of starting a new one: the iterator resumes at its first unseen batch
        and the iteration count and cost sum carry on, so the epoch ends exactly
        as if it had never been interrupted. ``step(batch)`` replaces
        :meth:`run_iteration` (how data-parallel operators train).
        """
        batches = self.training_iterator
        if self.in_epoch:
            # A checkpoint taken on an epoch's last batch: the iterator has already rolled
            # over to the next epoch, so iterating it would train that one as this one.
            if self.iteration >= len(self.training_iterator):
                batches = ()
        else:
            self.iteration, self.epoch_cost = 0, 0.0
        self.in_epoch = True
        for batch in batches:
            try:
                self.handler.add_(self._costs[1], (step or self.run_iteration)(batch))
            except NonFiniteError as error:
                raise NonFiniteError(f"{error}; {self._non_finite_source(batch)}") from None
            if on_iteration is not None:
                on_iteration(self)
        self.in_epoch = False
        self.epoch += 1
        return self.epoch_cost / max(self.iteration, 1)

    def _non_finite_source(self, batch: dict) -> str:
        """Where a non-finite cost can be traced to: a value of the batch, else the first bad parameter.

        Only called once the cost check failed, so training never pays for it.
        The cost is checked before the update, so neither the batch nor any
        parameter was changed by the failed step: the value named is the one
        that made the cost non-finite.
        """
        for section, values in batch.items():
            values = numpy.asarray(values)
            if numpy.issubdtype(values.dtype, numpy.number) and not numpy.isfinite(values).all():
                return f"the batch's {section!r} hold {_first_non_finite(values)}"
        for parameter_id, array in self.network.parameters.items():
            if not self.handler.all_finite(array):
                return f"parameter {parameter_id!r} holds {_first_non_finite(array.to_numpy())}"
        largest = max(((float(numpy.abs(a.to_numpy()).max(initial=0)), pid) for pid, a in self.network.parameters.items()),
                      default=(0.0, "none"))
        return (f"the network overflowed {self.handler.dtype} computing it (parameters have grown to "
                f"{largest[0]:.3g}, in {largest[1]!r}); lower the learning rate")

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Counters, iterator positions and the handler's RNG state, as JSON-ready values.

        With the network's parameters and the optimiser's state this is all a
        resumed run needs to continue bit for bit; those two hold arrays and are
        saved by :mod:`sigma_core.checkpoint`.
        """
        return {
            "epoch": self.epoch,
            "iteration": self.iteration,
            "total_iterations": self.total_iterations,
            "last_cost": self.last_cost,
            "epoch_cost": self.epoch_cost,
            "in_epoch": self.in_epoch,
            "training_iterator": self.training_iterator.state(),
            "validation_iterators": {name: it.state() for name, it in self.validation.items()},
            "rng": {"handler": self.handler.name, "state": self.handler.rng_state()},
        }

    def load_state_dict(self, state: dict):
        """Restore :meth:`state_dict` output; an interrupted epoch continues on the next :meth:`run_epoch`.

        The RNG state is restored only on a handler of the same name: another
        handler's generator may be a different kind, so its random stream then
        restarts from the run's seed (parameters still load; resume is not exact).
        """
        unknown = sorted(set(state["validation_iterators"]) - set(self.validation))
        if unknown:
            raise SigmaError(f"trainer {self.name!r}: state has validation iterator(s) {unknown} it does not have")
        self.epoch = int(state["epoch"])
        self.iteration = int(state["iteration"])
        self.total_iterations = int(state["total_iterations"])
        self.last_cost = float(state["last_cost"])
        self.epoch_cost = float(state["epoch_cost"])
        self._parameter_generation += 1  # restore() has just loaded parameters from the checkpoint
        self.in_epoch = bool(state["in_epoch"])
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

        A network with one output is a binary classifier: a hit when
        ``output > threshold`` agrees with ``target > 0.5``. Each pass ranks
        every class, so any ``top`` costs the same; the ranks are kept until
        the next training step, (re)initialisation or restored checkpoint, so
        the operator's end-of-epoch evaluation and a scorer hook at the same
        moment share one pass. (Parameters changed by hand in between are not
        noticed: train a step or call :meth:`initialise` again.)
        """
        key = (id(iterator), self.total_iterations, self._parameter_generation, threshold)
        if self._evaluation is None or self._evaluation[0] != key:
            self._evaluation = (key, self._rank_targets(iterator, threshold))
        ranks, cost = self._evaluation[1]
        rows = max(ranks.size, 1)
        report = {f"top{k}": int((ranks < k).sum()) / rows for k in top}
        report["accuracy"] = report.get("top1", report[f"top{top[0]}"])
        report["cost"] = cost
        report["records"] = int(ranks.size)
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
            labels = labels.argmax(-1).reshape(-1) if labels.ndim > 1 and labels.shape[-1] > 1 else labels.reshape(-1)
            if result.cost is not None:
                cost_sum += float(result.cost) * predictions.shape[0]
            if predictions.shape[1] == 1:  # one output: binary, thresholded
                predictions = numpy.concatenate([threshold - predictions, predictions - threshold], axis=1)
                labels = (labels > 0.5).astype(numpy.int64)
            if labels.shape[0] != predictions.shape[0]:
                raise SigmaError(f"trainer {self.name!r}: {labels.shape[0]} targets for {predictions.shape[0]} predictions")
            order = numpy.argsort(-predictions, axis=1, kind="stable")
            ranks.append(numpy.argmax(order == labels[:, None], axis=1))
        ranks = numpy.concatenate(ranks) if ranks else numpy.zeros(0, dtype=numpy.int64)
        return ranks, cost_sum / max(ranks.size, 1)


def _first_non_finite(values: numpy.ndarray) -> str:
    """``nan at index [1, 2]`` for the first non-finite element of ``values``."""
    index = tuple(int(i) for i in numpy.argwhere(~numpy.isfinite(values))[0])
    return f"{values[index]} at index {list(index)}"

"""Trainer: one network, its optimiser, its data, and the training step.

A training iteration, as in Sigma: begin a buffer session, copy the batch into
the handler, run the network forward under a tape watching the trainable
parameters, take the gradients, let the optimiser update the parameters in
place, end the session. The session makes every iteration after the first
reuse the previous iteration's buffers.
"""

from __future__ import annotations

import numpy

from .errors import NonFiniteError, SigmaError


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
    ):
        self.name = name
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
        self.last_cost = float("nan")
        self._trainable = []  # (id, NDArray) of parameters the optimiser may change

    def add_validation(self, name: str, iterator):
        if name in self.validation:
            raise SigmaError(f"trainer {self.name!r} already has a validation iterator named {name!r}")
        self.validation[name] = iterator

    # -- set-up --------------------------------------------------------------------------
    def initialise(self, handler):
        """Instantiate the network's parameters on ``handler`` and apply the initialisers."""
        self.handler = handler
        self.network.initialise(handler, self.initialisers)
        self.refresh_trainable()

    def refresh_trainable(self):
        """Re-read which parameters the optimiser may change (after freezing or a reload)."""
        params = self.network.parameters
        self._trainable = [(pid, params[pid]) for pid in self.optimiser.trainable(list(params))]

    # -- the training step -----------------------------------------------------------------
    def _externals(self, batch: dict) -> dict:
        h = self.handler
        externals = {self.inputs_alias: h.adopt(batch["inputs"])}
        if "targets" in batch:
            externals[self.targets_alias] = h.adopt(batch["targets"])
        return externals

    def run_iteration(self, batch: dict) -> float:
        """One optimisation step on ``batch``; returns its cost."""
        h = self.handler
        h.begin_session()
        try:
            externals = self._externals(batch)
            ids = [pid for pid, _ in self._trainable]
            params = [array for _, array in self._trainable]
            with h.tape() as tape:
                tape.watch(*params)
                result = self.network.forward(externals, training=True)
                if result.cost is None:
                    raise SigmaError(f"trainer {self.name!r}: the network has no cost layer, so there is nothing to optimise")
                grads = tape.gradient(result.cost, params)
            self.optimiser.step(h, dict(zip(ids, params)), dict(zip(ids, grads)))
            cost = float(result.cost)
        finally:
            h.end_session()
        if not numpy.isfinite(cost):
            raise NonFiniteError(
                f"trainer {self.name!r}: cost became {cost} at epoch {self.epoch + 1}, iteration {self.iteration + 1}"
            )
        self.last_cost = cost
        self.iteration += 1
        self.total_iterations += 1
        return cost

    def run_epoch(self, on_iteration=None) -> float:
        """Train on every batch of one epoch; returns the mean cost."""
        total, count = 0.0, 0
        self.iteration = 0
        for batch in self.training_iterator:
            total += self.run_iteration(batch)
            count += 1
            if on_iteration is not None:
                on_iteration(self)
        self.epoch += 1
        return total / max(count, 1)

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, iterator, top: tuple = (1,)) -> dict:
        """Cost and top-k accuracy over one pass of ``iterator``, in inference mode."""
        h = self.handler
        hits = {k: 0 for k in top}
        cost_sum, rows = 0.0, 0
        for batch in iterator:
            with h.no_grad():
                result = self.network.forward(self._externals(batch), training=False)
            predictions = result.outputs["predictions"].to_numpy()
            predictions = predictions.reshape(-1, predictions.shape[-1])
            n = predictions.shape[0]
            labels = numpy.asarray(batch["targets"])
            labels = labels.argmax(-1).reshape(-1) if labels.ndim > 1 and labels.shape[-1] > 1 else labels.reshape(-1)
            if result.cost is not None:
                cost_sum += float(result.cost) * n
            if predictions.shape[1] == 1:  # one output: binary, thresholded at 0.5
                predictions = numpy.concatenate([0.5 - predictions, predictions - 0.5], axis=1)
                labels = (labels > 0.5).astype(numpy.int64)
            order = numpy.argsort(-predictions, axis=1)
            for k in top:
                hits[k] += int((order[:, :k] == labels[:, None]).any(axis=1).sum())
            rows += n
        report = {f"top{k}": hits[k] / max(rows, 1) for k in top}
        report["accuracy"] = report.get("top1", report[f"top{top[0]}"])
        report["cost"] = cost_sum / max(rows, 1)
        report["records"] = rows
        return report

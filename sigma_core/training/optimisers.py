"""Optimisers: the contract (freeze filters, lazy memory, checkpointable state), SGD and Adam and their rules.

*Freeze* filters are fnmatch globs on parameter ids (``"*.biases"``); a frozen parameter is never touched.
Per-parameter memory is made on a parameter's first step and kept out of session buffer reuse. The arithmetic
is one handler op per parameter, :meth:`Handler.optimiser_update`, which a backend compiles into one pass: a
built-in optimiser names its memory, its :attr:`~Optimiser.rule` and the rule's :meth:`~Optimiser.arguments`;
a plugin one may override :meth:`~Optimiser.update`. Steps are counted per parameter, as in PyTorch (Adam's
bias correction starts at a parameter's own first step). Hyperparameters are attributes named after the
constructor's arguments, read every step, so a schedule may change them.
"""

import fnmatch
import inspect
import math
import types

from sigma_core.compute.updates import UpdateRule
from sigma_core.errors import ShapeError, SigmaError
from sigma_core.model.layers.base import old_id


class Optimiser:
    """Base class; ``weight_decay`` adds weight_decay·param to every gradient (coupled L2, as in PyTorch)."""

    #: Names of the per-parameter memory buffers, in the order the update rule receives them.
    memory_names: tuple[str, ...] = ()
    #: The name of the update rule :meth:`Handler.optimiser_update` applies ("sgd", "adam", ...).
    rule = ""
    #: Whether :meth:`arguments` change with the step (Adam's bias correction). When False they may depend on the
    #: hyperparameters alone: a compiled training step (sigmann-replay) asks for them only when those changed.
    stepwise = True

    def __init__(self, learning_rate, *, weight_decay=0.0, freeze=()):
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self._filters = list(dict.fromkeys([freeze] if isinstance(freeze, str) else freeze))
        self._memory = {}  # parameter id -> tuple of NDArrays, one per memory name
        self._steps = {}  # parameter id -> updates it has had (Adam's bias correction counts these)
        self.steps = 0
        #: When True, each step publishes every update as ``published["updates"]`` (expiring with the session).
        self.publish_updates = False
        #: Values hooks read after a step: learning_rate, step, frozen ids, updates.
        self.published = {}
        #: Bumped whenever the freeze filters or the memory arrays are replaced (not by a step, nor by a
        #: hyperparameter set): what holds on to the memory's buffers or the updated set (a compiled step) compares it.
        self.version = 0

    def __repr__(self):
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({arguments})"

    # -- freeze filters ------------------------------------------------------------
    @property
    def filters(self) -> tuple[str, ...]:
        """The freeze patterns, in the order they were added."""
        return tuple(self._filters)

    def freeze(self, pattern: str) -> None:
        """Stop updating every parameter whose id matches the glob ``pattern``."""
        if pattern not in self._filters:
            self._filters.append(pattern)
            self.version += 1

    def unfreeze(self, pattern: str) -> None:
        """Remove a freeze pattern added before."""
        if pattern not in self._filters:
            current = ", ".join(repr(p) for p in self._filters) or "none"
            raise SigmaError(f"{type(self).__name__}: no freeze pattern {pattern!r} (patterns: {current})")
        self._filters.remove(pattern)
        self.version += 1

    def clear_filters(self) -> None:
        self._filters.clear()
        self.version += 1

    def trainable(self, ids) -> list[str]:
        """The ids (in their order) that no freeze pattern matches."""
        if not self._filters:  # the usual case, on every step
            return list(ids)
        return [i for i in ids if not any(fnmatch.fnmatchcase(i, pattern) for pattern in self._filters)]

    # -- the update ------------------------------------------------------------------
    def step(self, handler, params: dict, grads: dict) -> None:
        """Update every non-frozen parameter in place from its gradient (frozen ones may have none)."""
        ids = self.trainable(params)
        missing = [i for i in ids if i not in grads]
        if missing:
            raise SigmaError(f"{type(self).__name__}: no gradient for parameter(s) {', '.join(missing)}; "
                             "compute their gradients or freeze them")
        for param_id in ids:
            _check_pair(handler, param_id, params[param_id], grads[param_id])
        frozen = []
        if len(ids) != len(params):  # ids is a subset of params: as many means nothing is frozen
            trained = set(ids)
            frozen = [i for i in params if i not in trained]
        # Memory first: it carries a checkpoint's count over from a parameter's old name before this step is counted.
        memories = [self._memory_of(handler, param_id, params[param_id]) for param_id in ids]
        counts = self.count_step(ids, frozen)
        updates = {} if self.publish_updates else None
        with handler.no_grad():
            for param_id, memory in zip(ids, memories):
                param, grad = params[param_id], grads[param_id]
                before = handler.copy(param) if updates is not None else None
                self.update(handler, param, grad, memory, counts[param_id])
                if updates is not None:
                    updates[param_id] = handler.subtract(param, before)
        if updates is not None:
            self.published["updates"] = updates

    def count_step(self, ids, frozen: list) -> dict:
        """Count a step of ``ids`` and publish its values (:attr:`published`); return the counts by parameter id.
        Part of :meth:`step`, public for a step run another way (a compiled step) that must count the same."""
        self.steps += 1
        counts = self._steps
        for param_id in ids:
            counts[param_id] = counts.get(param_id, 0) + 1
        self.published = {"learning_rate": self.learning_rate, "step": self.steps, "frozen": frozen}
        return counts

    def update(self, handler, param, grad, memory, step: int) -> None:
        """Update one parameter in place, its ``step``-th update (from 1), by the handler's :attr:`rule`;
        a plugin optimiser without one overrides this with other handler ops."""
        handler.optimiser_update(self.rule, param, grad, memory, weight_decay=self.weight_decay, **self.arguments(step))

    def arguments(self, step: int) -> dict:
        """The update rule's keyword arguments for a parameter's ``step``-th update (from 1)."""
        raise NotImplementedError

    def _memory_of(self, handler, param_id, param):
        memory = self._memory.get(param_id)
        if memory is None:
            old = old_id(param_id)
            if old in self._memory:  # restored from a checkpoint written before the parameter's rename
                self._memory[param_id] = self._memory.pop(old)
                self._steps[param_id] = self._steps.pop(old, 0)
                return self._memory_of(handler, param_id, param)
            memory = tuple(handler.keep(handler.zeros(param.shape)) for _ in self.memory_names)
            self._memory[param_id] = memory
        elif memory and memory[0].shape != param.shape:
            raise ShapeError(f"{type(self).__name__}: parameter {param_id!r} has shape {param.shape} "
                             f"but its optimiser memory has shape {memory[0].shape}")
        return memory

    @property
    def memory(self):
        """Each parameter's memory arrays by id, read-only: for tools naming the buffers a step touches."""
        return types.MappingProxyType(self._memory)

    # -- checkpoints -------------------------------------------------------------------
    def hyperparameters(self) -> dict:
        """Constructor arguments (except ``freeze``) and their current values."""
        names = inspect.signature(type(self)).parameters
        return {name: getattr(self, name) for name in names if name != "freeze"}

    def state_dict(self) -> dict:
        """Everything needed to continue identically: plain Python and NumPy values."""
        memory = {pid: {name: array.to_numpy() for name, array in zip(self.memory_names, arrays)}
                  for pid, arrays in self._memory.items()}
        return {"optimiser": type(self).__name__, "hyperparameters": self.hyperparameters(), "memory": memory,
                "freeze": list(self._filters), "steps": self.steps, "parameter_steps": dict(self._steps)}

    def load_state_dict(self, state: dict, handler) -> None:
        """Restore :meth:`state_dict` output into ``handler``; an old state without per-parameter steps
        gives every parameter with memory the global count."""
        name = type(self).__name__
        if state.get("optimiser") != name:
            raise SigmaError(f"{name}: cannot load the state of optimiser {state.get('optimiser')!r}")
        unknown = sorted(set(state["hyperparameters"]) - set(self.hyperparameters()))
        if unknown:
            raise SigmaError(f"{name}: unknown hyperparameter(s) in state: {', '.join(unknown)}")
        memory = {}
        for param_id, buffers in state["memory"].items():
            if set(buffers) != set(self.memory_names):
                raise SigmaError(f"{name}: memory of {param_id!r} has buffers {sorted(buffers)}, "
                                 f"expected {list(self.memory_names)}")
            memory[param_id] = tuple(handler.keep(handler.asarray(buffers[n])) for n in self.memory_names)
        for key, value in state["hyperparameters"].items():
            setattr(self, key, value)
        self._filters = list(state["freeze"])
        self.steps = int(state["steps"])
        steps = state.get("parameter_steps", dict.fromkeys(memory, self.steps))
        self._steps = {param_id: int(count) for param_id, count in steps.items()}
        self._memory = memory
        self.version += 1  # new memory arrays, maybe new filters


def _check_pair(handler, param_id, param, grad):
    if param.handler is not handler or grad.handler is not handler:
        role, array = ("parameter", param) if param.handler is not handler else ("gradient", grad)
        raise SigmaError(f"{role} {param_id!r} belongs to handler {array.handler!r}, not {handler!r}")
    if grad.shape != param.shape:
        raise ShapeError(f"gradient of {param_id!r} has shape {grad.shape}, the parameter {param.shape}")


# -- the core's optimisers: each names its update rule (registered by sigma_core.builtins), its memory and the
# -- rule's arguments; the others (momentum, Adagrad, ...) come from the sigmann-optimisers distribution -------


class GradientDescent(Optimiser):
    """param −= learning_rate·grad, Sigma's ``GradientDescentOptimiser``. No memory."""

    rule = "sgd"
    stepwise = False

    def __init__(self, learning_rate=0.01, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)

    def arguments(self, step):
        return {"lr": self.learning_rate}


class SGDRule(UpdateRule):
    """param −= lr·grad."""

    flops = 2

    def apply(self, k, param, grad, *, lr):
        tmp = k.empty(param.shape)
        k.xp.multiply(grad, lr, out=tmp)
        k.xp.subtract(param, tmp, out=param)

    def scalars(self, lr):
        return (lr,)

    def examples(self):
        return [("", 0, {"lr": 0.1}), ("weight-decay", 0, {"lr": 0.1, "weight_decay": 0.01})]


class Adam(Optimiser):
    """Adam (Kingma & Ba, 2015): param −= lr·m̂ / (√v̂ + eps), m̂ and v̂ the bias-corrected moment averages;
    memory ``first_moment`` and ``second_moment``. ``weight_decay`` is coupled L2, not AdamW's."""

    memory_names = ("first_moment", "second_moment")
    rule = "adam"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8, *, weight_decay=0.0, freeze=()):
        super().__init__(learning_rate, weight_decay=weight_decay, freeze=freeze)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def arguments(self, step):
        return {"lr": self.learning_rate, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps, "step": step}


class AdamRule(UpdateRule):
    """Adam (Kingma & Ba) with bias correction for this parameter's ``step`` (from 1), eps outside the root.

    m = β1·m + (1−β1)·grad;  v = β2·v + (1−β2)·grad²
    param −= lr/(1−β1^step) · m / (√v / √(1−β2^step) + eps): the paper's
    m̂/(√v̂ + eps) without materialising m̂ and v̂.
    """

    flops = 12
    stepwise = True

    def apply(self, k, param, grad, m, v, *, lr, beta1, beta2, eps, step):
        xp, tmp = k.xp, k.empty(param.shape)
        xp.multiply(m, beta1, out=m)
        xp.multiply(grad, 1.0 - beta1, out=tmp)
        xp.add(m, tmp, out=m)
        self.decay(k, v, grad, beta2, tmp)
        xp.sqrt(v, out=tmp)
        xp.multiply(tmp, 1.0 / math.sqrt(1.0 - beta2**step), out=tmp)
        xp.add(tmp, eps, out=tmp)
        xp.divide(m, tmp, out=tmp)
        xp.multiply(tmp, lr / (1.0 - beta1**step), out=tmp)
        xp.subtract(param, tmp, out=param)

    def scalars(self, lr, beta1, beta2, eps, step):
        """Adam's bias corrections fold into two scalars: the step size and the root's correction."""
        return (lr / (1.0 - beta1**step), beta1, 1.0 - beta1, beta2, 1.0 - beta2, 1.0 / math.sqrt(1.0 - beta2**step),
                eps)

    def examples(self):
        return [("", 2, {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}),
                ("weight-decay-beta2-0.9999", 2, {"lr": 0.001, "beta1": 0.99, "beta2": 0.9999, "eps": 1e-8,
                                                  "weight_decay": 0.01}),
                ("betas-0.9999", 2, {"lr": 0.001, "beta1": 0.9999, "beta2": 0.9999, "eps": 1e-8})]

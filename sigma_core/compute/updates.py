"""Optimiser update rules: what :meth:`Handler.optimiser_update` runs, found per handler the way ops are.

An :class:`UpdateRule` is one in-place step of a parameter and its memory arrays, written once over the kernels
``k`` (``k.xp``, temporaries from ``k.empty``): the reference every handler runs. It also says which scalars a
compiled kernel of it takes (:meth:`UpdateRule.scalars`), computed in double on the host. Rules arrive through
``register_update_rules`` (the core's ``sgd`` and ``adam`` from :mod:`sigma_core.builtins`, the rest from
distributions), whose ``kernels`` map a handler name to a subclass that runs faster there (a ``cpu`` kernel sets
``loop``: see docs/plugins.md, "Update rules"). A handler's :class:`Updates` resolves each rule on first use and
keeps it as a method of its own, so a warm step pays one attribute lookup, and a recorded step (sigmann-replay)
sees the call as ``updates.<rule>(...)``.

Why not ops: an update is untraced, writes its inputs in place, takes hyperparameters that change between steps
and has no VJP or finite-difference check; an :class:`~sigma_core.compute.ops.base.Op` is none of those.
"""

import functools
import types


class UpdateRule:
    """One optimiser update rule. A handler makes one instance of the class it runs on first use and keeps it.

    :meth:`apply` writes through at most two pooled temporaries, so a warm step allocates nothing. Complements
    such as 1 − β are computed in double (Python floats) before meeting the array's dtype, in :meth:`apply` and in
    :meth:`scalars` alike: 1 − β from β = 0.9999 rounded to float32 is wrong by 2e-4.
    """

    #: FLOPs per parameter element, for ``sigma explain``'s estimates.
    flops = 1
    #: True where :meth:`apply` also takes ``step``, the parameter's update count from 1 (Adam's bias correction).
    stepwise = False

    def apply(self, k, param, grad, *memory, **hyperparameters) -> None:
        """Update the raw arrays ``param`` and ``memory`` in place from ``grad``, over ``k.xp``."""
        raise NotImplementedError

    def scalars(self, **hyperparameters) -> tuple:
        """The scalar arguments of a compiled kernel of this rule (after its arrays), from the hyperparameters."""
        raise NotImplementedError

    def examples(self) -> list[tuple[str, int, dict]]:
        """The conformance kit's cases, ``(id, memory arrays, hyperparameters)``, run on every handler against the
        numpy handler (a ``weight_decay`` among them goes to the handler's L2 term): cover each branch. A case whose
        id ends in ``0.9999`` is also run in float32 against float64, where a complement 1 − ρ rounded to float32
        shows."""
        return []

    @staticmethod
    def decay(k, average, value, rho, tmp) -> None:
        """average = ρ·average + (1−ρ)·value², through ``tmp``: the running mean of squares of Adam, RMSProp, ..."""
        xp = k.xp
        xp.multiply(value, value, out=tmp)
        xp.multiply(tmp, 1.0 - rho, out=tmp)
        xp.multiply(average, rho, out=average)
        xp.add(average, tmp, out=average)


class Updates:
    """A handler's update rules, ``updates.<rule>(param, grad, *memory, **hyperparameters)``, and ``l2_gradient``.

    Each rule becomes an attribute of this instance on first use (:meth:`add`). A backend subclass runs rules as
    compiled passes by overriding :meth:`compiled` (and :meth:`l2_gradient`).
    """

    #: The handler whose kernels these are: the name rules' ``kernels`` are looked up by (the handler sets it).
    handler_name = "numpy"

    def __init__(self, kernels):
        self.kernels, self.xp, self.empty = kernels, kernels.xp, kernels.empty
        #: Rule name -> the :class:`UpdateRule` instance this handler runs it with.
        self.rules = {}

    def __getattr__(self, name):  # only for a rule not resolved yet: afterwards it is an attribute of the instance
        """Resolve rule ``name`` for this handler: the kernel a distribution registered for it, else its reference."""
        from sigma_core import plugins
        from sigma_core.errors import UnknownComponentError

        if name.startswith("_"):  # copy, pickle and friends probing
            raise AttributeError(name)
        try:
            component = plugins.get("update_rule", name)
        except UnknownComponentError as error:  # an AttributeError, so that getattr(updates, name, None) works
            raise AttributeError(f"handler {self.handler_name!r}: {error}") from None
        return self.add(name, component.load_for(self.handler_name, UpdateRule)())

    def add(self, name: str, rule: UpdateRule):
        """Make ``rule`` this handler's update ``name`` (:meth:`runner`) and return it."""
        if name in dir(type(self)):
            raise ValueError(f"update rule {name!r} is named like a method of {type(self).__name__}")
        self.rules[name] = rule
        update = self.runner(name, rule)
        setattr(self, name, update)
        return update

    def runner(self, name: str, rule: UpdateRule):
        """What runs ``rule``, registered as ``name``, on the arrays and hyperparameters: the backend's
        :meth:`compiled` pass (the reference where it declines) as a method of this object, where a recorded step
        finds the backend's launches; else the reference itself, bound to the kernels (no call in between)."""
        apply, kernels, scalars, compiled = rule.apply, self.kernels, rule.scalars, self.compiled(name, rule)
        if compiled is None:
            return functools.partial(apply, kernels)

        def run(self, *arrays, **hyperparameters):
            if not compiled(arrays, *scalars(**hyperparameters)):
                apply(kernels, *arrays, **hyperparameters)

        run.__doc__ = type(rule).__doc__
        return types.MethodType(run, self)

    def compiled(self, name: str, rule: UpdateRule):
        """A backend's compiled pass of ``rule``, ``compiled(arrays, *rule.scalars(...)) -> bool`` (False, running
        nothing, to decline: arrays it was not written for), or None; here None, the reference runs."""
        return None

    def l2_gradient(self, grad, param, weight_decay):
        """grad + weight_decay·param, into a pooled buffer (L2 regularisation)."""
        out = self.empty(param.shape)
        self.xp.multiply(param, weight_decay, out=out)
        self.xp.add(out, grad, out=out)
        return out

"""What an op is (:class:`Op`) and how a handler finds the one it runs (:func:`resolve`).

An :class:`Op` is a forward rule and its VJP over the kernels ``k`` the handler passes in (raw arrays of ``k.xp``,
never NDArrays), so it runs on every handler, which records it on the tape with :meth:`Op.backward`. The core's
own ops are registered like a plugin's (``register_ops`` in :mod:`sigma_core.builtins`); a distribution may also
register, per handler, a subclass that runs the hot part faster (a numba loop for ``cpu``). The contract in
full: docs/plugins.md, "Op".
"""

import math
from typing import Callable


class Op:
    """A differentiable op. A handler makes one instance of the class it runs on first use and keeps it, so an
    instance may cache constants built from the first ``k`` it sees (``k.dtype``, ``k.xp``)."""

    #: True where forward and backward reach data only through ``k``'s kernel methods (never ``k.xp``): the handler
    #: then calls them directly, so a recorded step sees each kernel call (and a backend's launch for it). False:
    #: they run through ``k.run_op``, one call that a recorded step keeps whole.
    through_kernels = False
    #: Positions of inputs that get no gradient (targets, masks): the conformance kit neither watches nor perturbs them.
    constants: tuple[int, ...] = ()
    #: True where forward draws from the handler's generator (dropout): the kit checks it by finite differences
    #: only, resetting the generator before each evaluation.
    draws = False

    def forward(self, k, *inputs, **params) -> tuple:
        """``(out, saved)``: the output (a raw array, in a buffer from ``k.empty``/``k.full`` so that a step reuses
        it) and what :meth:`backward` needs; ``inputs`` (raw arrays or numbers) are never written to."""
        raise NotImplementedError

    def backward(self, k, g, inputs, out, saved, needs, **params) -> tuple:
        """A gradient (raw array) per input, from ``g``, the gradient of ``out``; None where not ``needs[i]``."""
        raise NotImplementedError

    def check(self, inputs, params) -> None:
        """Raise a :class:`~sigma_core.errors.ShapeError` naming the op where ``inputs`` do not fit (every call)."""

    def examples(self) -> list[tuple[str, Callable, dict]]:
        """The conformance kit's cases, ``(id, make(rng) -> list of NumPy inputs, params)``, run on every handler
        against finite differences and the numpy handler: cover each branch of the rule. Float inputs are float64;
        :attr:`constants` may be of any dtype (integer labels, a boolean mask)."""
        return []

    # -- input makers for examples(): each keeps an op away from kinks, ties and its domain's edge --------------
    @staticmethod
    def example(id: str, *makers, **params) -> tuple:
        """One case of :meth:`examples`: each input made by a maker of ``rng`` (or a constant array), with
        ``params``."""
        return id, lambda rng: [m(rng) if callable(m) else m for m in makers], params

    @staticmethod
    def normal(*shape):
        return lambda rng: rng.standard_normal(shape)

    @staticmethod
    def positive(*shape):
        """In [0.5, 2]: inside the domain of log, sqrt and a real power."""
        return lambda rng: rng.uniform(0.5, 2.0, shape)

    @staticmethod
    def away(*shape):
        """|x| in [0.2, 1.5]: a finite step never crosses the kink of abs, relu or sign."""
        return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 1.5, shape)

    @staticmethod
    def grid(*shape, offset=0.0):
        """Distinct values 0.25 apart (shuffled): no ties for max/min; grids 0.125 apart never meet (maximum)."""

        def make(rng):
            n = math.prod(shape)
            return ((rng.permutation(n) - n // 2) * 0.25 + offset).reshape(shape)

        return make


class KernelOp(Op):
    """A core op: its rules call ``k``'s kernels only, which backends override (``through_kernels``)."""

    through_kernels = True


def cases(**makers) -> list[tuple]:
    """Examples without params, by id (``_`` in an id reads ``-``): ``cases(same=(Op.normal(3), Op.normal(3)))``."""
    return [Op.example(id.replace("_", "-"), *inputs) for id, inputs in makers.items()]


def resolve(name: str, handler_name: str) -> Op:
    """A new instance of what runs op ``name`` on the handler ``handler_name``: the kernel a distribution registered
    for it, else the portable rule. A kernel that cannot be loaded is an error naming the op, the handler and the
    distribution, never a quiet fall back to the slower rule."""
    from sigma_core import plugins
    from sigma_core.errors import SigmaError, UnknownComponentError

    try:
        component = plugins.get("op", name)
    except UnknownComponentError:
        known = ", ".join(c.name for c in plugins.components("op")) or "none"
        raise SigmaError(f"unknown op {name!r} (registered: {known})") from None
    return component.load_for(handler_name, Op)()

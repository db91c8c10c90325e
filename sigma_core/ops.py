"""Operations a plugin adds: a forward rule and its VJP over a handler's kernels, plus faster kernels per handler.

The core's own ops are methods of :class:`~sigma_core.handler.Handler`; an op
from a distribution is an :class:`Op` subclass registered through the
``register_ops`` hook and run with ``handler.op(name, *inputs, **params)``.
Its portable rule is written over the kernels ``k`` the handler passes in
(``k.xp``, ``k.empty``, ``k.matmul``, ``k.activate``, ...: raw arrays, never
NDArrays), so it runs on every handler; a distribution may also register, per
handler name, a subclass that does the hot part faster (a numba loop for
``cpu``), used when that handler runs the op. The handler records the op on
the tape with :meth:`Op.backward` as its VJP, so a layer using it gets its
gradients like any other.
"""

from __future__ import annotations

from typing import Callable


class Op:
    """A differentiable op a plugin adds: forward rule + VJP over a handler's kernels ``k``.

    A handler makes one instance of the class it runs (the portable rule or
    its own kernel) on first use and keeps it, so an instance may cache
    constants it builds from the first ``k`` it sees (``k.dtype``, ``k.xp``).
    """

    def forward(self, k, *inputs, **params) -> tuple:
        """``(out, saved)``: the output (a raw array of ``k.xp``) and what :meth:`backward` needs.

        ``inputs`` are raw arrays (or Python numbers), never written to;
        ``params`` are the keyword arguments of ``handler.op``, plain values.
        Take buffers from ``k.empty``/``k.full`` so a training step reuses them.
        """
        raise NotImplementedError

    def backward(self, k, g, inputs, out, saved, needs, **params) -> tuple:
        """One gradient (a raw array, or None) per input, from ``g``, the gradient of ``out``.

        ``needs[i]`` says whether input ``i`` wants one: skip the work where it does not.
        """
        raise NotImplementedError

    def check(self, inputs, params) -> None:
        """Raise :class:`~sigma_core.errors.ShapeError` naming the op where ``inputs`` do not fit (cheap: every call)."""

    def examples(self) -> list[tuple[str, Callable, dict]]:
        """Conformance cases: ``(case id, make(rng) -> list of float64 NumPy inputs, params)``.

        The conformance kit runs each on every handler against finite
        differences and the numpy handler; cover each branch of the rule.
        """
        return []


def resolve(name: str, handler_name: str) -> Op:
    """A new instance of what runs op ``name`` on the handler named ``handler_name``: the kernel a distribution
    registered for that handler, or else the portable rule. A registered kernel that cannot be loaded is an
    error (a :class:`~sigma_core.errors.ComponentLoadError` naming the op, the handler and the distribution),
    never a quiet fall back to the slower rule."""
    from . import plugins
    from .errors import ComponentLoadError, SigmaError, UnknownComponentError

    try:
        component = plugins.get("op", name)
    except UnknownComponentError:
        known = ", ".join(c.name for c in plugins.components("op")) or "none"
        raise SigmaError(f"unknown op {name!r} (registered: {known})") from None
    cls = component.load_kernel(handler_name)
    where = f"the {handler_name!r} kernel of op {name!r}" if cls is not None else f"op {name!r}"
    cls = component.load() if cls is None else cls
    if not (isinstance(cls, type) and issubclass(cls, Op)):
        raise ComponentLoadError(f"{where} from {component.distribution} {component.version} is "
                                 f"{cls!r}, not a sigma_core.Op subclass")
    return cls()


__all__ = ["Op", "resolve"]

"""Operations a distribution adds (``register_ops``), run as ``handler.op(name, *inputs, **params)``.

An :class:`Op` is a forward rule and its VJP over the kernels ``k`` the handler passes in (raw arrays of
``k.xp``, never NDArrays), so it runs on every handler, which records it on the tape with :meth:`Op.backward`;
a distribution may also register, per handler, a subclass that runs the hot part faster (a numba loop for
``cpu``). The contract in full: docs/plugins.md, "Op". The core's own ops are methods of the Handler.
"""

from typing import Callable


class Op:
    """A differentiable op. A handler makes one instance of the class it runs on first use and keeps it, so an
    instance may cache constants built from the first ``k`` it sees (``k.dtype``, ``k.xp``)."""

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
        """The conformance kit's cases, ``(id, make(rng) -> list of float64 NumPy inputs, params)``, run on every
        handler against finite differences and the numpy handler: cover each branch of the rule."""
        return []


def resolve(name: str, handler_name: str) -> Op:
    """A new instance of what runs op ``name`` on the handler ``handler_name``: the kernel a distribution registered
    for it, else the portable rule. A kernel that cannot be loaded is an error naming the op, the handler and the
    distribution, never a quiet fall back to the slower rule."""
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

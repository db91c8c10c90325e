"""The plugin contract: the hooks through which components reach Sigma.

A plugin is a module (or object) named by an entry point in the group
``"sigma"``; Sigma's own components arrive through the same hooks (see
:mod:`sigma_core.builtins`), so a plugin can do anything the core can. A plugin
implements any of the hooks below with :data:`hookimpl`::

    from sigma_core.hookspecs import hookimpl

    @hookimpl
    def register_activations(register):
        register("maxout", "sigmann_maxout.activation:Maxout", aliases=("mo",))

Every hook receives one argument, ``register``, with the signature of
:class:`Register`. Discovery runs every plugin's hooks at start-up, so a hook
must only *describe* its components: pass a lazy ``"package.module:attr"``
target instead of importing heavy modules, and give a ``check`` that looks for
a dependency (``importlib.util.find_spec("numba") is not None``) rather than
importing it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

import pluggy

PROJECT = "sigma"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """The callable each hook receives; one call registers one component.

    ``name``
        Unique within the kind, together with every other component's aliases.
    ``target``
        The object itself, or a lazy ``"package.module:attr"`` string that is
        imported only when the component is first used.
    ``aliases``
        Other names that resolve to this component.
    ``check``
        Zero-argument callable returning ``(available, reason)``; ``reason``
        says in a few words why it cannot run here (``"no CUDA device"``). It
        must be cheap and must not import heavy dependencies. ``None`` means
        always available.
    ``rank``
        Preference among handlers when the user asks for ``auto``; higher wins.
        Ignored for other kinds.
    ``description``
        One line for ``sigma plugins``.
    """

    def __call__(
        self,
        name: str,
        target: object,
        *,
        aliases: Iterable[str] = (),
        check: Callable[[], tuple[bool, str]] | None = None,
        rank: int = 0,
        description: str = "",
    ) -> None: ...


@hookspec
def register_handlers(register: Register) -> None:
    """Register compute handlers: ``sigma_core.handler.Handler`` subclasses.

    Each is constructed as ``cls(dtype="float32", seed=None)``. Give a ``check``
    when the handler needs hardware or an optional package, and a ``rank`` so
    ``auto`` prefers the fastest one that can run.
    """


@hookspec
def register_layers(register: Register) -> None:
    """Register layer classes, by the name a run file uses for them."""


@hookspec
def register_activations(register: Register) -> None:
    """Register activation functions or classes, by the name a run file uses."""


@hookspec
def register_optimisers(register: Register) -> None:
    """Register optimiser classes (``"sgd"``, ``"adam"``, ...)."""


@hookspec
def register_initialisers(register: Register) -> None:
    """Register weight initialisers (``"xavier"``, ``"he"``, ...)."""


@hookspec
def register_hooks(register: Register) -> None:
    """Register training hooks: callbacks run at points of the training loop."""


@hookspec
def register_extractors(register: Register) -> None:
    """Register data extractors: things that turn a source into arrays."""


@hookspec
def register_monitors(register: Register) -> None:
    """Register monitors: things that record or display training progress."""


@hookspec
def register_operators(register: Register) -> None:
    """Register operators: differentiable functions usable in a network graph."""

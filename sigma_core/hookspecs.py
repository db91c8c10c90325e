"""The plugin contract: the hooks through which components reach Sigma.

A plugin is a module (or object) named by an entry point in the group
``"sigma"``; Sigma's own components arrive through the same hooks (see
:mod:`sigma_core.builtins`), so a plugin can do anything the core can. A plugin
implements any of the hooks below with :data:`hookimpl`::

    from sigma_core.hookspecs import hookimpl

    @hookimpl
    def register_layers(register):
        register("maxout", "sigmann_maxout:Maxout", description="max over k linear pieces")

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
    """Register layer classes (``sigma_core.layers.base.Layer`` subclasses) by the ``type`` a run file uses.

    A layer writes only its forward pass in handler ops; autodiff gives its
    gradients. ``[[network.layers]]`` keys other than ``type``, ``name`` and
    ``inputs`` are its constructor arguments.
    """


@hookspec
def register_activations(register: Register) -> None:
    """Register activations by the name a layer's ``activation = ...`` uses.

    The target is an activation object (see ``sigma_core.layers.activations``)
    that applies itself through handler ops, so its gradient comes for free.
    """


@hookspec
def register_optimisers(register: Register) -> None:
    """Register optimisers (``sigma_core.optimisers.base.Optimiser`` subclasses) for ``[optimiser] type``."""


@hookspec
def register_initialisers(register: Register) -> None:
    """Register parameter initialisers for ``[initialisers]`` bindings (``"xavier"``, ``"he"``, ...)."""


@hookspec
def register_hooks(register: Register) -> None:
    """Register hooks (``sigma_core.hooks.Hook`` subclasses) for ``[[hooks]] type``.

    A hook is part of the training logic: it fires on the operator's time
    steps, reads and writes the run's registry on the training thread, and
    may change the run (schedules, stoppers, checkpoints).
    """


@hookspec
def register_extractors(register: Register) -> None:
    """Register data extractors for ``[data] source``: callables returning a dataset.

    Called with the ``[data]`` table's other keys; return a
    ``sigma_core.data.Dataset`` (or ``{"inputs": ..., "targets": ...}``
    arrays). Put heavy dependencies behind a lazy target and a ``check``.
    """


@hookspec
def register_monitors(register: Register) -> None:
    """Register monitors (``sigma_core.monitors.Monitor`` subclasses) for ``[[monitors]]`` and ``--monitor``.

    A monitor watches a run from outside the training logic: it is called at
    the operator's events, reads the registry, and sends commands back
    (pause, resume, stop, reset, step, set). Constructed from the table's
    keys other than ``type``.
    """


@hookspec
def register_operators(register: Register) -> None:
    """Register training operators for ``[operator] type``: classes that run a trainer.

    Constructed as ``cls(trainer, epochs=..., hooks=..., monitors=...,
    **settings)`` and driven with ``run()``; they own the epoch loop and the
    pause/resume/stop/reset signals (see ``sigma_core.operators``), and may
    delegate work to several workers.
    """


@hookspec
def register_commands(cli) -> None:
    """Add ``sigma`` subcommands, as llm's hook of the same name does.

    ``cli`` is the ``sigma`` command's argparse sub-parsers object, so a
    plugin adds a command as the built-in ones do::

        parser = cli.add_parser("bench", help="one line for sigma --help")
        parser.add_argument("--quick", action="store_true")
        parser.set_defaults(run=lambda args: 0)  # takes the parsed arguments, returns the exit status

    Every ``sigma`` invocation runs this hook to build its parser: import heavy
    modules inside ``run``, not here. A name that a built-in command already
    has is an error naming the plugin's distribution.
    """

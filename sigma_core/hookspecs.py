"""The plugin contract: the hooks through which components reach Sigma.

A plugin is a module (or object) named by an entry point in the group
``"sigma"``. Sigma's own components arrive through the same hooks
(:mod:`sigma_core.builtins`), so a plugin can do anything the core can::

    from sigma_core.hookspecs import hookimpl

    @hookimpl
    def register_layers(register):
        register("maxout", "sigmann_maxout:Maxout", description="max over k linear pieces")

Discovery runs every plugin's hooks at start-up, so a hook must only
*describe* its components: a lazy ``"package.module:attr"`` target rather
than an import of heavy modules, and a ``check`` that looks for a dependency
(``importlib.util.find_spec("numba") is not None``) rather than importing it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

import pluggy

PROJECT = "sigma"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """What every ``register_*`` hook but ``register_commands`` receives; one call registers one component.

    ``name`` and the ``aliases`` must be unique within the kind. ``target`` is
    the object, or a ``"package.module:attr"`` string imported on first use.
    ``check`` returns ``(available, reason)`` cheaply, without importing heavy
    dependencies; ``reason`` says why not in a few words (``"no CUDA device"``);
    ``None``: always available. ``rank`` orders handlers for ``auto`` (higher
    wins). ``description`` is one line for ``sigma plugins``.
    """

    def __call__(self, name: str, target: object, *, aliases: Iterable[str] = (),
                 check: Callable[[], tuple[bool, str]] | None = None, rank: int = 0, description: str = "") -> None: ...


@hookspec
def register_handlers(register: Register) -> None:
    """Compute handlers (``sigma_core.handler.Handler`` subclasses), built as ``cls(dtype="float32", seed=None)``.

    A ``check`` says whether the hardware or package it needs is here; ``rank`` lets ``auto`` pick the fastest.
    """


@hookspec
def register_layers(register: Register) -> None:
    """Layer classes (``sigma_core.layers.base.Layer``) for ``[[network.layers]] type``.

    The table's keys but ``type``, ``name`` and ``inputs`` are constructor arguments. A layer
    writes only its forward pass in handler ops; autodiff gives its gradients.
    """


@hookspec
def register_activations(register: Register) -> None:
    """Activation objects (``sigma_core.layers.activations``) for ``activation = ...``, applied in handler ops."""


@hookspec
def register_optimisers(register: Register) -> None:
    """Optimisers (``sigma_core.optimisers.base.Optimiser``) for ``[optimiser] type``, built from its other keys."""


@hookspec
def register_initialisers(register: Register) -> None:
    """Parameter initialisers for ``[initialisers]`` bindings (``"he"``, ...), built from the binding's other keys."""


@hookspec
def register_hooks(register: Register) -> None:
    """Hooks (``sigma_core.hooks.Hook``) for ``[[hooks]] type``, built from the table's other keys.

    A hook is training logic: it fires on the operator's time steps, on the training thread, reads and
    writes the run's registry and may change the run (schedules, stoppers, checkpoints).
    """


@hookspec
def register_extractors(register: Register) -> None:
    """Data extractors for ``[data] source``: callables given the table's other keys, returning a
    ``sigma_core.data.Dataset``, a ``{"inputs": ..., "targets": ...}`` dict of arrays, or an
    iterable of such dicts (chunks, concatenated in order)."""


@hookspec
def register_monitors(register: Register) -> None:
    """Monitors (``sigma_core.monitors.Monitor``) for ``[[monitors]]`` and ``--monitor``, built from the other keys.

    A monitor watches a run from outside the training logic: called at the operator's events,
    it reads the registry and sends commands back (pause, resume, stop, reset, step, set).
    """


@hookspec
def register_operators(register: Register) -> None:
    """Training operators for ``[operator] type``: classes that run a trainer.

    Built as ``cls(trainer, epochs=..., hooks=..., monitors=..., **settings)`` and driven with ``run()``,
    an operator owns the epoch loop and the pause/resume/stop/reset signals (``sigma_core.operators``).
    """


@hookspec
def register_commands(cli) -> None:
    """Add ``sigma`` subcommands to ``cli``, the command's argparse sub-parsers (as llm's hook of the name does)::

        parser = cli.add_parser("bench", help="one line for sigma --help")
        parser.add_argument("--quick", action="store_true")
        parser.set_defaults(run=lambda args: 0)  # takes the parsed arguments, returns the exit status

    Every ``sigma`` invocation runs this hook to build its parser, so import heavy modules inside
    ``run``. Taking a built-in command's name is an error naming the plugin's distribution.
    """

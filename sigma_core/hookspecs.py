"""The plugin contract: the ``register_*`` functions through which components reach Sigma.

A plugin is a module (or object) named by an entry point in the group
``"sigma"`` that implements some of them (pluggy's hookspecs, each marked
``@hookimpl``). Sigma's own components arrive through the same functions
(:mod:`sigma_core.builtins`), so a plugin can do anything the core can::

    from sigma_core.hookspecs import hookimpl

    @hookimpl
    def register_layers(register):
        register("maxout", "sigmann_maxout:Maxout", description="max over k linear pieces")

Discovery runs every plugin's ``register_*`` functions at start-up, so they
must only *describe* its components: a lazy ``"package.module:attr"`` string
rather than an import of heavy modules, and a ``check`` that looks for a dependency
(``importlib.util.find_spec("numba") is not None``) rather than importing it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

import pluggy

PROJECT = "sigma"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """What every ``register_*`` function but ``register_commands`` receives; one call registers one component.

    ``name`` and the ``aliases`` must be unique within the kind. ``implementation``
    is the class or function, or a ``"package.module:attr"`` string imported on first use.
    ``check`` returns ``(available, reason)`` cheaply, without importing heavy
    dependencies; ``reason`` says why not in a few words (``"no CUDA device"``);
    ``None``: always available. ``rank`` orders handlers for ``auto`` (higher
    wins). ``description`` is one line for ``sigma plugins``.
    """

    def __call__(self, name: str, implementation: object, *, aliases: Iterable[str] = (),
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
    """Hooks (``sigma_core.Hook`` subclasses) for ``[[hooks]] type`` and ``sigma train --monitor``, built from the
    table's other keys.

    A hook takes part in a run: the loop calls the events it overrides (``on_iteration``, ``on_epoch``, ...),
    on the training thread or, ``threaded``, on its own; it reads the run's values and may steer the run
    (schedules, stoppers, checkpoints, progress bars, metrics files, dashboards).
    """


@hookspec
def register_extractors(register: Register) -> None:
    """Data extractors for ``[data] source``: callables given the table's other keys, returning a
    ``sigma_core.data.Dataset``, a ``{"inputs": ..., "targets": ...}`` dict of arrays, or an
    iterable of such dicts (chunks, concatenated in order)."""


@hookspec
def register_sources(register: Register) -> None:
    """Sources for a run file's data ``path`` that the core does not read itself, by URL scheme (``"https"``).

    The core reads a plain local file or folder. A URL, a list of fallbacks (by its first entry's scheme),
    a compressed file (``.gz``, ``.zip``, ``.tar``, ...: scheme ``"file"``) or a path given with ``md5`` or
    ``sha256`` goes to the source registered for its scheme, called as ``source(value, md5=None, sha256=None)``
    and returning a local :class:`pathlib.Path` (``sigmann-data`` registers ``http``, ``https`` and ``file``).
    """


@hookspec
def register_caches(register: Register) -> None:
    """Dataset caches for the ``[data]`` key of their name (``blocks = {...}``, from ``sigmann-data``).

    Called as ``cache(settings, source=, config=, arguments=, read=, preprocessing=)``: ``settings`` is the
    key's value, ``config`` the rest of the data table, ``arguments`` the extractor's (paths resolved),
    ``read()`` runs the extractor and yields ``Dataset`` chunks, and ``preprocessing`` is the table's
    ``sigma_core.Preprocessing``, to fit and apply chunk by chunk. It returns the dataset to train on.
    """


@hookspec
def register_readers(register: Register) -> None:
    """Input-file readers for ``sigma predict``, by suffix (``"png"``; a name without a dot by its last
    ``-`` part, as in MNIST's ``t10k-images-idx3-ubyte``). The core reads ``.npy``, ``.npz``, ``.csv`` and
    JSON on stdin itself. Called as ``reader(path, network=)``, a reader returns the file's records, raw (as
    the run's data source gives them), as a NumPy array shaped for the network's input; ``network.predict``
    applies the run's fitted preprocess transforms (``network.preprocessing``) to them.
    """


@hookspec
def register_exporters(register: Register) -> None:
    """Formats for ``sigma export --format NAME``, called as ``export(checkpoint, out)`` with two paths.

    A format written layer by layer can take its layers from this table too: ``"onnx/dense"`` is how
    ``sigmann-onnx`` writes a dense layer, and a layer plugin registers ``"onnx/maxout"`` to join it.
    """


@hookspec
def register_operators(register: Register) -> None:
    """Training operators for ``[operator] type``: strategies that say how the loop trains one iteration.

    Built as ``cls(trainer, **settings)``, an operator is a ``sigma_core.Strategy`` (its ``step(batch)``, and
    ``setup``, ``merge``, ``reset``, ``teardown``); the loop (``sigma_core.Loop``) owns the epochs, the
    commands and the events around it.
    """


@hookspec
def register_ops(register: Register) -> None:
    """Differentiable operations (``sigma_core.Op`` subclasses) that layers run with ``handler.op(name, ...)``.

    ``register(name, implementation, *, kernels={}, description="")``: the
    implementation is the portable rule, written over the handler's kernels
    (``k.xp``), which runs on every handler; ``kernels`` maps a handler name
    (``"cpu"``) to a faster ``Op`` subclass (lazy too) that runs on that handler instead. A
    kernel that cannot be loaded is an error naming the op, the handler and
    the distribution, never a quiet fall back to the rule.
    """


@hookspec
def register_compilers(register: Register) -> None:
    """Step compilers for ``[training] compile``: callables ``compiler(trainer)`` that return the function a
    trainer runs each training step with (``sigma_core.Trainer.compile_step``), e.g. recorded kernel calls
    replayed. ``compile = "auto"`` (the default) takes the available one of the highest ``rank``, if any.
    """


@hookspec
def register_sections(register: Register) -> None:
    """Top-level run-file sections that a plugin's command reads and the core does not (``[tune]``, sigmann-tune's).

    The implementation is the section's rule (see :mod:`sigma_core.config`; lazy ``"module:attr"`` allowed):
    a run file's section is held against it like the core's own, and ``sigma train`` passes it through unread.
    """


@hookspec
def register_commands(cli) -> None:
    """Add ``sigma`` subcommands to ``cli``, the command's argparse sub-parsers (as llm's function of the name does)::

        parser = cli.add_parser("bench", help="one line for sigma --help")
        parser.add_argument("--quick", action="store_true")
        parser.set_defaults(run=lambda args: 0)  # takes the parsed arguments, returns the exit status

    Every ``sigma`` invocation runs this function to build its parser, so import heavy modules inside
    ``run``. Taking a built-in command's name is an error naming the plugin's distribution.
    """

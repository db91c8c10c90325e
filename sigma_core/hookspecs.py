"""The plugin contract: the ``register_*`` functions through which components reach Sigma.

A plugin is a module named by an entry point in the group ``"sigma"`` that implements some of them, each
marked ``@hookimpl``. Sigma's own components arrive the same way (:mod:`sigma_core.builtins`)::

    from sigma_core import hookimpl

    @hookimpl
    def register_layers(register):
        register("maxout", "sigmann_maxout:Maxout", description="max over k linear pieces")

Every ``sigma`` command runs them at start-up, so they only *describe* components: a lazy
``"package.module:attr"`` string, and a ``check`` that looks for a dependency
(``importlib.util.find_spec("numba") is not None``) rather than importing it. Each function below is one kind
of component, its docstring the whole contract.
"""

from typing import Callable, Iterable, Protocol

import pluggy

PROJECT = "sigma"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """What every ``register_*`` but ``register_commands`` receives; one call registers one component.

    ``name`` and ``aliases`` (one string or several) are unique within the kind. ``implementation`` is the
    class or function, or a ``"package.module:attr"`` string imported on first use. ``check()`` returns
    ``(available, reason)`` cheaply (``(False, "no CUDA device")``); None: always available. ``rank`` orders
    handlers and step compilers for ``auto`` (higher wins). ``description`` is one line for ``sigma plugins``.
    ``kernels`` is for ops and update rules only (:func:`register_ops`, :func:`register_update_rules`).
    """

    def __call__(self, name: str, implementation: object, *, aliases: str | Iterable[str] = (),
                 check: Callable[[], tuple[bool, str]] | None = None, rank: int = 0, description: str = "",
                 kernels: dict[str, object] | None = None) -> None: ...


@hookspec
def register_handlers(register: Register) -> None:
    """Compute handlers: ``sigma_core.Handler`` subclasses, built as ``cls(dtype="float32", seed=None)``."""


@hookspec
def register_layers(register: Register) -> None:
    """Layer classes (``sigma_core.Layer``) for ``[[network.layers]] type``, built from the table's other keys but
    ``name`` and ``inputs``; a layer writes its forward pass in handler ops, autodiff the rest."""


@hookspec
def register_activations(register: Register) -> None:
    """Activation objects (``sigma_core.resolve_activation``) for ``activation = ...``."""


@hookspec
def register_optimisers(register: Register) -> None:
    """Optimisers (``sigma_core.Optimiser``) for ``[optimiser] type``, built from its other keys."""


@hookspec
def register_initialisers(register: Register) -> None:
    """Parameter initialisers (``sigma_core.Initialiser``) for ``[initialisers]`` bindings."""


@hookspec
def register_hooks(register: Register) -> None:
    """Hooks (``sigma_core.Hook`` subclasses) for ``[[hooks]] type`` and ``sigma train --monitor``, built from the
    table's other keys: the loop calls the events a hook overrides, inline or ``threaded``."""


@hookspec
def register_extractors(register: Register) -> None:
    """Data extractors for ``[data] extractor``: callables of the table's other keys returning a
    ``sigma_core.Dataset``, a ``{"inputs": ..., "targets": ...}`` dict of arrays or an iterable of such dicts."""


@hookspec
def register_transforms(register: Register) -> None:
    """``[data] preprocess`` transforms: ``transform(value)``, of the transform's table value, returns a
    ``sigma_core.Transform`` (validating ``value`` in one line naming ``data.preprocess.<name>``). An adaptive one
    carries ``statistics`` that see every training record first; its ``value()`` spells them out, so checkpoints
    and exports keep them and a loaded network takes raw inputs."""


@hookspec
def register_sources(register: Register) -> None:
    """Sources for a data ``path`` that is not a plain local file or folder, by URL scheme: a URL, a list of
    fallbacks, a compressed file (``"file"``) or a path with ``md5`` or ``sha256`` goes to
    ``source(value, md5=None, sha256=None)``, which returns a local :class:`pathlib.Path`."""


@hookspec
def register_caches(register: Register) -> None:
    """Dataset caches for the ``[data]`` key of their name (``blocks = {...}``), called as
    ``cache(settings, extractor=, config=, arguments=, read=, preprocessing=)``: the key's value, the extractor's
    name, the rest of the table, its arguments, ``read()`` yielding ``Dataset`` chunks and the table's
    ``sigma_core.Preprocessing`` (fitted chunk by chunk). Returns the dataset to train on."""


@hookspec
def register_readers(register: Register) -> None:
    """Input-file readers for ``sigma predict``, by suffix (``"png"``; a name without a dot by its last ``-``
    part): ``reader(path, network=)`` returns the file's raw records as a NumPy array."""


@hookspec
def register_exporters(register: Register) -> None:
    """Formats for ``sigma export --format NAME``: ``export(checkpoint, out)``, two paths. A layer joins a
    layer-by-layer format as ``"FORMAT/LAYER"`` (``"onnx/maxout"``)."""


@hookspec
def register_loaders(register: Register) -> None:
    """Network files ``sigma_core.load`` reads besides checkpoints, by suffix (``"safetensors"``):
    ``loader(path)`` returns a ``sigma_core.Saved`` (name, layer list, dtype, parameters, fitted preprocess)."""


@hookspec
def register_operators(register: Register) -> None:
    """Training operators for ``[operator] type``: ``sigma_core.Operator`` classes, built as
    ``cls(trainer, **settings)``, that say how the loop (``sigma_core.Loop``) trains one iteration."""


@hookspec
def register_ops(register: Register) -> None:
    """Differentiable operations (``sigma_core.Op`` subclasses) that layers run with ``handler.op(name, ...)``: the
    portable rule over ``k.xp``; ``kernels`` maps a handler name (``"cpu"``) to a faster ``Op`` (lazy too) for it. A
    kernel that cannot be loaded is an error, never a quiet fall back to the rule."""


@hookspec
def register_update_rules(register: Register) -> None:
    """Optimiser update rules (``sigma_core.UpdateRule`` subclasses) that ``handler.optimiser_update(name, ...)``
    runs for an optimiser's ``rule``: the reference over ``k.xp``; ``kernels`` maps a handler name to a faster
    subclass (lazy too), as for ops. A kind of its own, not an op: an update is untraced, in place, and has no VJP."""


@hookspec
def register_compilers(register: Register) -> None:
    """Step compilers for ``[training] compile``: ``compiler(trainer)`` returns the function the trainer runs each
    step with; ``compile = "auto"`` takes the available one of the highest ``rank``."""


@hookspec
def register_sections(register: Register) -> None:
    """Top-level run-file sections a plugin's command reads (``[tune]``): the implementation is the section's rule
    (:mod:`sigma_core.config`); ``sigma train`` checks it and passes it on unread."""


@hookspec
def register_commands(cli) -> None:
    """Add ``sigma`` subcommands to ``cli``, the command's argparse sub-parsers::

        parser = cli.add_parser("bench", help="one line for sigma --help")
        parser.set_defaults(run=lambda args: 0)  # takes the parsed arguments, returns the exit status

    Every ``sigma`` invocation runs this, so import heavy modules inside ``run``. A command named like one of the
    core's (``sigmann``'s) is left out, with a warning naming the plugin's distribution.
    """


#: Kind ``x`` is registered through ``register_xs``, in the order above; a "command" through ``register_commands``.
KINDS = tuple(name[len("register_"):-1] for name, spec in list(globals().items())
              if name.startswith("register_") and callable(spec))

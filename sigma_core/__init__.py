"""Sigma: a plugin-based machine-learning framework you can read in an afternoon.

This lazy table is the public API: plugins and backends import only from ``sigma_core`` itself. ``import
sigma_core`` must be cheap (every ``sigma`` command pays for it), so each name is imported on first use. Start
reading at :mod:`sigma_core.hookspecs`, the plugin contract.
"""

import importlib
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("sigmann")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

#: module (under sigma_core) -> the public names it provides, imported on first use; "public=own" where
#: the module's own name differs
_PROVIDERS = {
    # the plugin contract, registered components, one-line errors, the one validator
    "hookspecs": "hookimpl",
    "plugins": "components build COMPONENT_KINDS=KINDS get_component=get load_component=load MORE_PLUGINS=MORE",
    "errors": "SigmaError ConfigError ShapeError ArchitectureError NonFiniteError UnknownComponentError "
              "describe one_line first_non_finite",
    "config": "require accepts rule_of describe_rule ARGUMENT_CONVENTIONS=CONVENTIONS load_run_file=load "
              "validate_run=validate apply_override check_arguments=check RUN_FILE_SECTIONS=SCHEMA",
    # compute: what backends (sigma_cpu, sigma_cuda) and op plugins (sigmann-recurrent) build on
    "compute.handler": "Handler NumpyHandler",
    "compute.backend": "create_handler available_handlers handler_availability",
    "compute.kernels": "ACTIVATIONS ArrayKernels", "compute.updates": "UpdateRule Updates",
    "compute.ndarray": "NDArray ExpiredArrayError", "compute.ops.base": "Op",
    "compute.streams": "CounterStreams GOLDEN", "compute.memory": "require_memory=require available_memory=available",
    # model: layers, architectures, networks, initialisers
    "model.layers.base": "Layer ForwardContext", "model.layers.dense": "default_weight_initialisers",
    "model.layers.dropout": "DropoutLayer=Dropout", "model.layers.activations": "resolve_activation",
    "model.constructs": "Input Output Dense Dropout Elementwise Concatenate Add SoftmaxCE SquaredDifference",
    "model.architecture": "Construct Architecture from_layer_list", "model.network": "Network",
    "model.initialisers": "Initialiser Constant Gaussian Uniform Xavier He Custom",
    "model.inference": "load Saved read_saved",
    # training: optimisers, the trainer, the loop and its operators (operators), runs, checkpoints, files
    "training.optimisers": "Optimiser GradientDescent Adam",
    "training.trainer": "Trainer", "training.loop": "Loop Operator SingleWorker State EpochReport operator_from_config",
    "run": "build_run step_compiler", "reading": "check_readable",
    "training.checkpoint": "save_checkpoint load_checkpoint checkpoint_path latest_checkpoint CheckpointError",
    "training.rundir": "run_versions=versions RUNS=ROOT",
    "atomic": "atomic_path atomic_write remove_stale partial_prefix check_writable WriteError write_error",
    # what hook plugins (sigmann-monitors, -tensorboard, -plots, -web, -criteria) build on
    "hooks.base": "Hook HookError", "hooks.values": "RunView Values Best epoch_values",
    "hooks.lines": "epoch_line", "hooks.tables": "parse_hook_option",
    "hooks.checkpoints": "CheckpointHook checkpoint_now",
    # what data plugins (sigmann-data, -csv, -transforms, -mnist, -images) build on
    "data.dataset": "Dataset Records DataError split_bounds check_finite",
    "data.preprocessing": "Preprocessing Transform Range as_float",
    "data.iterators": "MinibatchIterator",
    "data.sources": "dataset_from_config resolve_path COMPRESSED_SUFFIXES SOURCE_KEYS=COMMON_KEYS",
    "data.numpy_files": "DEFLATE_RATIO load_numpy",
    # the sigma command: shared options, main
    "cli": "cli_options=options cli_main=main",
}
_LAZY = {public: (module, own or public) for module, names in _PROVIDERS.items()
         for public, _, own in (name.partition("=") for name in names.split())}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'sigma_core' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = globals()[name] = getattr(importlib.import_module(f"sigma_core.{module}"), attribute)
    return value

"""Sigma: a plugin-based machine-learning framework you can read in an afternoon.

Start reading at :mod:`sigma_core.hookspecs`, the plugin contract. ``import sigma_core``
must be cheap (every ``sigma`` command pays for it), so the names below are imported on first use.
"""

import importlib
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("sigmann")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

_LAZY = {  # a plugin author needs only these: hookimpl, Layer, ForwardContext, default_weight_initialisers
    "hookimpl": "sigma_core.hookspecs",
    **dict.fromkeys(["Layer", "ForwardContext"], "sigma_core.layers.base"),
    "default_weight_initialisers": "sigma_core.layers.dense",
    "Initialiser": "sigma_core.initialisers",
    **dict.fromkeys(["create_handler", "resolve_handler_name", "available_handlers", "handler_availability"],
                    "sigma_core.backend"),
    **dict.fromkeys(["Construct", "Architecture"], "sigma_core.architecture"),
    "Network": "sigma_core.network",
    "load": "sigma_core.inference",
    "Trainer": "sigma_core.trainer",
    # what the test kit (sigmann-testing) checks handlers and layers with
    "NumpyHandler": "sigma_core.handler",
    "ACTIVATIONS": "sigma_core.kernels",
    "ExpiredArrayError": "sigma_core.ndarray",
    "ShapeError": "sigma_core.errors",
    **dict.fromkeys(["components", "build"], "sigma_core.plugins"),  # what is registered; one built from a config
    **dict.fromkeys(["Input", "Output", "Dense", "Dropout", "Elementwise", "Concatenate", "Add",
                     "SoftmaxCE", "SquaredDifference"], "sigma_core.constructs"),
    # what an op or layer plugin (sigmann-recurrent) builds on
    "Op": "sigma_core.ops",
    "ArchitectureError": "sigma_core.errors",
    "resolve_activation": "sigma_core.layers.activations",
    **dict.fromkeys(["Constant", "Gaussian", "Uniform", "Xavier", "He", "Custom"], "sigma_core.initialisers"),
    **dict.fromkeys(["GradientDescent", "Momentum", "Nesterov", "Adagrad", "Adadelta", "RMSProp", "Adam"],
                    "sigma_core.optimisers.rules"),
    "from_layer_list": "sigma_core.architecture",  # a run file's [[network.layers]] as an architecture
    # the training loop, and what an operator (a strategy: sigmann-threads, sigmann-ray) builds on
    **dict.fromkeys(["Loop", "Strategy", "SingleWorker", "State", "EpochReport", "strategy_from_config"],
                    "sigma_core.loop"),
    **dict.fromkeys(["build_run", "step_compiler"], "sigma_core.run"),
    **dict.fromkeys(["SigmaError", "ConfigError", "NonFiniteError", "describe"], "sigma_core.errors"),
    # what a step compiler (sigmann-replay) and its commands build on
    "Handler": "sigma_core.handler",
    # what a backend's kernels build on (sigma_cpu, sigma_cuda): the reference kernels, the update rules' scalars
    # for one-pass update kernels, counter-based random streams
    **dict.fromkeys(["ArrayKernels", "CompiledUpdates", "UPDATE_SCALARS"], "sigma_core.kernels"),
    **dict.fromkeys(["CounterStreams", "GOLDEN"], "sigma_core.streams"),
    "Optimiser": "sigma_core.optimisers.base",
    "load_run_file": "sigma_core.config:load",  # a run file read, overridden (--set) and validated
    "apply_override": "sigma_core.config",  # one --set key=value applied to a run file's tables (sigmann-tune)
    "cli_options": "sigma_core.cli:options",
    "cli_main": "sigma_core.cli:main",  # the sigma command itself, as a function of its arguments (tests)
    "validate_run": "sigma_core.config:validate",  # a run file's table checked and completed with the defaults
    # a validated run file with every component's defaults too, and as TOML (--print-config; sigmann-mlflow)
    **dict.fromkeys(["resolved_config", "config_toml"], "sigma_core.cli.help"),
    "load_component": "sigma_core.plugins:load",  # a registered component by kind and name, imported
    "dataset_from_config": "sigma_core.data.sources",  # a [data] table's dataset  # argparse parents shared by commands (--debug, --handler, ...)
    # what data plugins (sigmann-data, sigmann-mnist, sigmann-images) build on
    **dict.fromkeys(["Dataset", "Records", "split_bounds", "check_finite"], "sigma_core.data.dataset"),
    "DataError": "sigma_core.data.errors",
    "Preprocessing": "sigma_core.data.preprocessing",
    **dict.fromkeys(["resolve_path", "COMPRESSED_SUFFIXES"], "sigma_core.data.sources"),
    "DEFLATE_RATIO": "sigma_core.data.numpy_files",
    "require": "sigma_core.config",  # a run-file value checked against a rule ("int >= 1"), one line if not
    "require_memory": "sigma_core.memory:require",  # an allocation checked against the memory available
    **dict.fromkeys(["atomic_path", "atomic_write", "remove_stale", "partial_prefix", "check_writable", "WriteError",
                     "write_error"],
                    "sigma_core.atomic"),
    "one_line": "sigma_core.errors",
    "check_readable": "sigma_core.reading",  # a file a user hands us is a regular file (not a FIFO, device, folder)
    # what hook plugins (sigmann-tensorboard, -plots, -web, -criteria) build on: the protocol, the run's values,
    # the metrics records, checkpoints
    **dict.fromkeys(["Hook", "HookError"], "sigma_core.hooks.base"),
    **dict.fromkeys(["RunView", "Values", "Best"], "sigma_core.hooks.values"),
    **dict.fromkeys(["MetricsHook", "record", "read_metrics"], "sigma_core.hooks.metrics"),
    **dict.fromkeys(["CheckpointHook", "checkpoint_now"], "sigma_core.hooks.checkpoints"),
    # run directories (runs/<name>/version_N): the folders sigma plot and sigma dashboard read, and their labels
    "run_directories": "sigma_core.rundir",
    "run_label": "sigma_core.rundir:label",
    **dict.fromkeys(["save_checkpoint", "load_checkpoint", "checkpoint_path", "latest_checkpoint"],
                    "sigma_core.checkpoint"),
    "NDArray": "sigma_core.ndarray",
    # what the web dashboard edits: the rules of arguments with one meaning everywhere, dropout layers' p
    "ARGUMENT_CONVENTIONS": "sigma_core.config:CONVENTIONS",
    "DropoutLayer": "sigma_core.layers.dropout:Dropout",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    location = _LAZY.get(name)  # "module", or "module:attr" where the public name differs from the module's own
    if location is None:
        raise AttributeError(f"module 'sigma_core' has no attribute {name!r}")
    module, _, attribute = location.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value

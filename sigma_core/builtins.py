"""Sigma's own components, registered through the same ``register_*`` functions as any plugin's.

:mod:`sigma_core.plugins` registers this module for the ``sigmann`` distribution: anything built in could have
been a plugin, and the rest (monitors, transforms, the CSV extractor, predict and export) are: the distributions
the README's main-job command installs. Implementations are lazy ``"module:attr"`` strings, so discovery imports
nothing heavy.
"""

from sigma_core.hookspecs import hookimpl


def _rows(register, rows):
    """One ``register`` call per row of ``(name, "module:attr", description for sigma plugins, *aliases)``."""
    for name, implementation, description, *aliases in rows:
        register(name, implementation, aliases=aliases, description=description)


@hookimpl
def register_handlers(register):
    register("numpy", "sigma_core.compute.handler:NumpyHandler", description="NumPy on the CPU; runs everywhere")


@hookimpl
def register_ops(register):
    from sigma_core.compute.ops import CORE  # a table of strings: importing it imports no op

    for name, target in CORE.items():
        register(name, f"sigma_core.compute.ops.{target}", description="the core's")


@hookimpl
def register_layers(register):
    _rows(register, [
        ("input", "sigma_core.model.layers.io:Input", "external data into the network"),
        ("output", "sigma_core.model.layers.io:Output", "publishes its input as an external output"),
        ("dense", "sigma_core.model.layers.dense:Dense", "activation(x·W + b)", "fullyconnected", "fc"),
        ("elementwise", "sigma_core.model.layers.dense:Elementwise", "activation(x*w + b) per feature"),
        ("dropout", "sigma_core.model.layers.dropout:Dropout", "inverted dropout"),
        ("concatenate", "sigma_core.model.layers.merge:Concatenate", "joins inputs on the feature axis", "concat"),
        ("add", "sigma_core.model.layers.merge:Add", "elementwise sum of inputs (residual)"),
        ("softmax_ce", "sigma_core.model.layers.cost:SoftmaxCrossEntropy", "cost", "softmaxce",
         "softmax_cross_entropy"),
        ("squared_difference", "sigma_core.model.layers.cost:SquaredDifference", "cost", "squareddiff", "mse"),
    ])


@hookimpl
def register_activations(register):
    _rows(register, [
        ("relu", "sigma_core.model.layers.activations:RELU", "max(x, 0)", "rel"),
        ("sigmoid", "sigma_core.model.layers.activations:SIGMOID", "1 / (1 + e^-x)"),
        ("tanh", "sigma_core.model.layers.activations:TANH", "hyperbolic tangent"),
        ("softplus", "sigma_core.model.layers.activations:SOFTPLUS", "log(1 + e^x)"),
        ("none", "sigma_core.model.layers.activations:NONE", "identity", "linear", "identity"),
    ])


@hookimpl
def register_optimisers(register):
    _rows(register, [
        ("sgd", "sigma_core.training.optimisers:GradientDescent", "param -= lr·g", "gradient_descent"),
        ("adam", "sigma_core.training.optimisers:Adam", "Adam with bias correction"),
    ])


@hookimpl
def register_update_rules(register):
    _rows(register, [
        ("sgd", "sigma_core.training.optimisers:SGDRule", "param -= lr·g"),
        ("adam", "sigma_core.training.optimisers:AdamRule", "Adam's moments, bias-corrected"),
    ])


#: Components the core registered before a distribution took them over, by (kind, name): an old run file naming one
#: gets a line saying what to install, where anything else unknown gets :data:`sigma_core.plugins.MORE`.
MOVED_OUT = {("optimiser", name): "sigmann-optimisers" for name in ("momentum", "nesterov", "adagrad", "adadelta",
                                                                     "rmsprop")}


@hookimpl
def register_initialisers(register):
    _rows(register, [
        ("constant", "sigma_core.model.initialisers:Constant", "every element the same value"),
        ("gaussian", "sigma_core.model.initialisers:Gaussian", "normal draws (std, mean)", "normal"),
        ("uniform", "sigma_core.model.initialisers:Uniform", "uniform draws in [low, high)"),
        ("xavier", "sigma_core.model.initialisers:Xavier", "Glorot uniform from fan-in and fan-out", "glorot"),
        ("he", "sigma_core.model.initialisers:He", "normal with std √(2/fan_in), for ReLU"),
    ])


@hookimpl
def register_extractors(register):
    _rows(register, [
        ("npy", "sigma_core.data.numpy_files:load_numpy", ".npy or .npz, no pickle", "numpy"),  # numpy: older name
        ("npz", "sigma_core.data.numpy_files:load_npz", "inputs and targets arrays of an .npz archive"),
        ("xor", "sigma_core.data.synthetic:xor", "the four XOR cases"),
        ("and", "sigma_core.data.synthetic:and_", "the four AND cases"),
        ("synthetic", "sigma_core.data.synthetic:synthetic_classification", "random data of a chosen size"),
    ])


@hookimpl
def register_hooks(register):
    _rows(register, [
        ("checkpoint", "sigma_core.hooks.checkpoints:CheckpointHook", "saves resumable checkpoints, keeping k",
         "checkpoint_saver"),
        ("epoch_lines", "sigma_core.hooks.lines:EpochLines", "one plain line per epoch (progress's stand-in)"),
    ])


@hookimpl
def register_operators(register):
    register("single_worker", "sigma_core.training.loop:SingleWorker", aliases="single",
             description="trains on one thread")


@hookimpl
def register_commands(cli):
    from sigma_core.cli import register_commands as core_commands  # the parser modules: only where sigma runs

    core_commands(cli)

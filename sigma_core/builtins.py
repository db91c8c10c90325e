"""Sigma's own components, registered through the same ``register_*`` functions as any plugin's.

:mod:`sigma_core.plugins` registers this module for the ``sigmann`` distribution: anything built in could have
been a plugin. Implementations are lazy ``"module:attr"`` strings, so discovery imports nothing heavy.
"""

from sigma_core.hookspecs import hookimpl

#: kind -> rows of ``(name, "module:attr", description for sigma plugins, *aliases)``.
COMPONENTS = {
    "handler": [("numpy", "sigma_core.handler:NumpyHandler", "NumPy on the CPU; runs everywhere")],
    "layer": [
        ("input", "sigma_core.layers.io:Input", "external data into the network"),
        ("output", "sigma_core.layers.io:Output", "publishes its input as an external output"),
        ("dense", "sigma_core.layers.dense:Dense", "activation(x·W + b)", "fullyconnected", "fc"),
        ("elementwise", "sigma_core.layers.dense:Elementwise", "activation(x*w + b) per feature"),
        ("dropout", "sigma_core.layers.dropout:Dropout", "inverted dropout"),
        ("concatenate", "sigma_core.layers.merge:Concatenate", "joins inputs on the feature axis", "concat"),
        ("add", "sigma_core.layers.merge:Add", "elementwise sum of inputs (residual)"),
        ("softmax_ce", "sigma_core.layers.cost:SoftmaxCrossEntropy", "cost", "softmaxce", "softmax_cross_entropy"),
        ("squared_difference", "sigma_core.layers.cost:SquaredDifference", "cost", "squareddiff", "mse"),
    ],
    "activation": [
        ("relu", "sigma_core.layers.activations:RELU", "max(x, 0)", "rel"),
        ("sigmoid", "sigma_core.layers.activations:SIGMOID", "1 / (1 + e^-x)"),
        ("tanh", "sigma_core.layers.activations:TANH", "hyperbolic tangent"),
        ("softplus", "sigma_core.layers.activations:SOFTPLUS", "log(1 + e^x)"),
        ("none", "sigma_core.layers.activations:NONE", "identity", "linear", "identity"),
    ],
    "optimiser": [
        ("sgd", "sigma_core.optimisers:GradientDescent", "param -= lr·g", "gradient_descent"),
        ("momentum", "sigma_core.optimisers:Momentum", "gradient descent with classical momentum"),
        ("nesterov", "sigma_core.optimisers:Nesterov", "gradient descent with Nesterov momentum"),
        ("adagrad", "sigma_core.optimisers:Adagrad", "per-element rates from summed squared gradients"),
        ("adadelta", "sigma_core.optimisers:Adadelta", "Zeiler's Adadelta (Algorithm 1)"),
        ("rmsprop", "sigma_core.optimisers:RMSProp", "rates from a running mean of squared gradients"),
        ("adam", "sigma_core.optimisers:Adam", "Adam with bias correction"),
    ],
    "initialiser": [
        ("constant", "sigma_core.initialisers:Constant", "every element the same value"),
        ("gaussian", "sigma_core.initialisers:Gaussian", "normal draws (std, mean)", "normal"),
        ("uniform", "sigma_core.initialisers:Uniform", "uniform draws in [low, high)"),
        ("xavier", "sigma_core.initialisers:Xavier", "Glorot uniform from fan-in and fan-out", "glorot"),
        ("he", "sigma_core.initialisers:He", "normal with std √(2/fan_in), for ReLU"),
    ],
    "extractor": [
        ("csv", "sigma_core.data.csv_extractor:read_csv", "columns of a delimited text file"),
        ("npy", "sigma_core.data.numpy_files:load_numpy", ".npy or .npz, no pickle", "numpy"),  # numpy: older name
        ("npz", "sigma_core.data.numpy_files:load_npz", "inputs and targets arrays of an .npz archive"),
        ("xor", "sigma_core.data.synthetic:xor", "the four XOR cases"),
        ("and", "sigma_core.data.synthetic:and_", "the four AND cases"),
        ("synthetic", "sigma_core.data.synthetic:synthetic_classification", "random data of a chosen size"),
    ],
    "exporter": [("safetensors", "sigma_core.inference:export_safetensors", "parameters, run metadata, preprocessing")],
    "hook": [
        ("progress", "sigma_core.hooks.progress:ProgressHook", "a progress bar per epoch (unless --quiet)"),
        ("metrics", "sigma_core.hooks.metrics:MetricsHook", "costs, scores and run values to metrics.csv and .jsonl"),
        ("checkpoint", "sigma_core.hooks.checkpoints:CheckpointHook", "saves resumable checkpoints, keeping k",
         "checkpoint_saver"),
        ("stop", "sigma_core.hooks.stoppers:StopTraining", "stops at an epoch", "stop_training"),
        ("early_stopping", "sigma_core.hooks.stoppers:EarlyStopping", "stops when a value stops improving"),
        ("stop_on_non_finite", "sigma_core.hooks.stoppers:StopOnNonFinite", "stops at a NaN/Inf", "nan_stopper"),
        ("staircase_schedule", "sigma_core.hooks.schedules:StaircaseSchedule", "rate × gamma every n", "step_schedule"),
        ("exponential_schedule", "sigma_core.hooks.schedules:ExponentialSchedule", "learning rate × gamma^t"),
        ("cosine_schedule", "sigma_core.hooks.schedules:CosineSchedule", "cosine-annealed learning rate"),
        ("warm_up", "sigma_core.hooks.schedules:WarmUp", "linear learning-rate warm-up", "warmup"),
    ],
    "operator": [("single_worker", "sigma_core.loop:SingleWorker", "trains on one thread", "single")],
}


def _registering(kind: str):
    """The ``register_{kind}s`` hookimpl: one ``register`` call per row of ``COMPONENTS[kind]``."""

    def register_rows(register):
        for name, implementation, description, *aliases in COMPONENTS[kind]:
            register(name, implementation, aliases=aliases, description=description)

    return hookimpl(register_rows)


for _kind in COMPONENTS:  # register_handlers, register_layers, ...: the hookimpls pluggy finds by name
    globals()[f"register_{_kind}s"] = _registering(_kind)

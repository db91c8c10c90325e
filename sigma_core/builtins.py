"""Sigma's own components, registered through the same public ``register_*`` functions as any plugin's.

:mod:`sigma_core.plugins` registers this module directly, for the ``sigmann``
distribution. Going through the ``register_*`` functions keeps the core honest:
anything built in could have been a plugin. Implementations are lazy ``"module:attr"``
strings, so that discovery imports nothing heavy.
"""

from sigma_core.hookspecs import hookimpl


@hookimpl
def register_handlers(register):
    register("numpy", "sigma_core.handler:NumpyHandler", description="NumPy on the CPU; runs everywhere")


@hookimpl
def register_layers(register):
    layers = "sigma_core.layers"
    register("input", f"{layers}.io:Input", description="external data into the network")
    register("output", f"{layers}.io:Output", description="publishes its input as an external output")
    register("dense", f"{layers}.dense:Dense", aliases=("fullyconnected", "fc"), description="activation(x·W + b)")
    register("elementwise", f"{layers}.dense:Elementwise", description="activation(x*w + b) per feature")
    register("dropout", f"{layers}.dropout:Dropout", description="inverted dropout")
    register("concatenate", f"{layers}.merge:Concatenate", aliases=("concat",), description="joins inputs on the feature axis")
    register("add", f"{layers}.merge:Add", description="elementwise sum of inputs (residual)")
    register("softmax_ce", f"{layers}.cost:SoftmaxCrossEntropy", aliases=("softmaxce", "softmax_cross_entropy"), description="softmax cross-entropy cost")
    register("squared_difference", f"{layers}.cost:SquaredDifference", aliases=("squareddiff", "mse"), description="squared-difference cost")


@hookimpl
def register_activations(register):
    activations = "sigma_core.layers.activations"
    register("relu", f"{activations}:RELU", aliases=("rel",), description="max(x, 0)")
    register("sigmoid", f"{activations}:SIGMOID", description="1 / (1 + e^-x)")
    register("tanh", f"{activations}:TANH", description="hyperbolic tangent")
    register("softplus", f"{activations}:SOFTPLUS", description="log(1 + e^x)")
    register("none", f"{activations}:NONE", aliases=("linear", "identity"), description="identity")


@hookimpl
def register_optimisers(register):
    optimisers = "sigma_core.optimisers"
    register("sgd", f"{optimisers}.rules:GradientDescent", aliases=("gradient_descent",), description="param -= lr·g")
    register("momentum", f"{optimisers}.rules:Momentum", description="gradient descent with classical momentum")
    register("nesterov", f"{optimisers}.rules:Nesterov", description="gradient descent with Nesterov momentum")
    register("adagrad", f"{optimisers}.rules:Adagrad", description="per-element rates from summed squared gradients")
    register("adadelta", f"{optimisers}.rules:Adadelta", description="Zeiler's Adadelta (Algorithm 1)")
    register("rmsprop", f"{optimisers}.rules:RMSProp", description="rates from a running mean of squared gradients")
    register("adam", f"{optimisers}.rules:Adam", description="Adam with bias correction")


@hookimpl
def register_initialisers(register):
    initialisers = "sigma_core.initialisers"
    register("constant", f"{initialisers}:Constant", description="every element the same value")
    register("gaussian", f"{initialisers}:Gaussian", aliases=("normal",), description="normal draws (std, mean)")
    register("uniform", f"{initialisers}:Uniform", description="uniform draws in [low, high)")
    register("xavier", f"{initialisers}:Xavier", aliases=("glorot",), description="Glorot uniform from fan-in and fan-out")
    register("he", f"{initialisers}:He", description="normal with std √(2/fan_in), for ReLU")


@hookimpl
def register_extractors(register):
    data = "sigma_core.data"
    register("csv", f"{data}.csv_extractor:read_csv", description="columns of a delimited text file")
    register("npy", f"{data}.numpy_files:load_numpy", aliases=("numpy",),  # "numpy" names the handler now
             description=".npy or .npz, no pickle")
    register("npz", f"{data}.numpy_files:load_npz", description="inputs and targets arrays of an .npz archive")
    register("xor", f"{data}.synthetic:xor", description="the four XOR cases")
    register("and", f"{data}.synthetic:and_", description="the four AND cases")
    register("synthetic", f"{data}.synthetic:synthetic_classification", description="random data of a chosen size")


@hookimpl
def register_exporters(register):
    register("safetensors", "sigma_core.inference:export_safetensors",
             description="the parameters, with the name, dtype, layer list and preprocessing as metadata")


@hookimpl
def register_hooks(register):
    hooks = "sigma_core.hooks"
    register("progress", f"{hooks}.progress:ProgressHook",
             description="a progress bar per epoch on the terminal (sigma train adds it unless --quiet)")
    register("metrics", f"{hooks}.metrics:MetricsHook",
             description="appends costs, scores, learning rate and chosen run values to metrics.csv and .jsonl")
    register("checkpoint", f"{hooks}.checkpoints:CheckpointHook", aliases=("checkpoint_saver",),
             description="saves a resumable checkpoint every n epochs or iterations (or on a new best), keeping k")
    register("stop", f"{hooks}.stoppers:StopTraining", aliases=("stop_training",), description="stops at an epoch")
    register("early_stopping", f"{hooks}.stoppers:EarlyStopping", description="stops when a value stops improving")
    register("stop_on_non_finite", f"{hooks}.stoppers:StopOnNonFinite", aliases=("nan_stopper",),
             description="stops with an error naming the first NaN/Inf parameter")
    register("staircase_schedule", f"{hooks}.schedules:StaircaseSchedule", aliases=("step_schedule",),
             description="learning rate × gamma every n")
    register("exponential_schedule", f"{hooks}.schedules:ExponentialSchedule", description="learning rate × gamma^t")
    register("cosine_schedule", f"{hooks}.schedules:CosineSchedule", description="cosine-annealed learning rate")
    register("warm_up", f"{hooks}.schedules:WarmUp", aliases=("warmup",), description="linear learning-rate warm-up")


@hookimpl
def register_operators(register):
    register("single_worker", "sigma_core.loop:SingleWorker", aliases=("single",),
             description="trains on one thread; pause, resume, step, stop and reset from hooks")

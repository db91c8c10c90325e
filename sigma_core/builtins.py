"""Sigma's own components, registered through the same public hooks as any plugin's.

:mod:`sigma_core.plugins` registers this module directly, for the ``sigmann``
distribution. Going through the hooks keeps the core honest: anything built in
could have been a plugin. Targets are lazy so that discovery imports nothing heavy.
"""

from sigma_core.hookspecs import hookimpl


@hookimpl
def register_handlers(register):
    register("numpy", "sigma_core.handlers.numpy_handler:NumpyHandler", description="NumPy on the CPU; runs everywhere")


@hookimpl
def register_layers(register):
    layers = "sigma_core.layers"
    register("input", f"{layers}.io:Input", description="external data into the network")
    register("output", f"{layers}.io:Output", description="publishes its input as an external output")
    register("dense", f"{layers}.dense:Dense", aliases=("fullyconnected", "fc"), description="activation(x·W + b)")
    register("elementwise", f"{layers}.dense:Elementwise", description="activation(x*w + b) per feature")
    register("dropout", f"{layers}.dropout:Dropout", description="inverted dropout")
    register("recurrent", f"{layers}.recurrent:Recurrent", aliases=("rnn",), description="Elman RNN over (batch, time, features)")
    register("lstm", f"{layers}.recurrent:LSTM", description="long short-term memory")
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
    register("idx", f"{data}.idx:load_idx", description="IDX files (MNIST format), header checked")
    register("numpy", f"{data}.numpy_files:load_numpy", aliases=("npy",), description=".npy or .npz, no pickle")
    register("npz", f"{data}.numpy_files:load_npz", description="inputs and targets arrays of an .npz archive")
    register("xor", f"{data}.synthetic:xor", description="the four XOR cases")
    register("and", f"{data}.synthetic:and_", description="the four AND cases")
    register("synthetic", f"{data}.synthetic:synthetic_classification", description="random data of a chosen size")


@hookimpl
def register_hooks(register):
    hooks = "sigma_core.hooks"
    register("value_reporter", f"{hooks}.reporters:ValueReporter", description="logs registry values")
    register("accumulated_value_reporter", f"{hooks}.reporters:AccumulatedValueReporter",
             description="logs a value's mean (or sum) since the last report")
    register("epoch_iteration_reporter", f"{hooks}.reporters:EpochIterationReporter", description="logs epoch and iteration")
    register("running_time", f"{hooks}.reporters:RunningTimeReporter", aliases=("running_time_reporter",),
             description="logs iterations/s and time per iteration or epoch (average, min, max)")
    register("accuracy_reporter", f"{hooks}.reporters:AccuracyReporter",
             description="logs top-k (or thresholded binary) accuracy on a validation iterator")
    register("accuracy_scorer", f"{hooks}.scorers:AccuracyScorer", description="writes shared.<iterator>.accuracy_top<k>")
    register("binary_accuracy_scorer", f"{hooks}.scorers:BinaryAccuracyScorer",
             description="writes shared.<iterator>.accuracy for one thresholded output")
    register("number_accumulator", f"{hooks}.processors:NumberAccumulator", description="sums or averages a value")
    register("metric_processor", f"{hooks}.processors:MetricProcessor",
             description="mean and std of weights and of updates into shared.metrics")
    register("stop", f"{hooks}.stoppers:StopTraining", aliases=("stop_training",),
             description="stops at an epoch, or when its criteria pass")
    register("early_stopping", f"{hooks}.stoppers:EarlyStopping", description="stops when a value stops improving")
    register("stop_on_non_finite", f"{hooks}.stoppers:StopOnNonFinite", aliases=("nan_stopper",),
             description="stops with an error naming the first NaN/Inf parameter")
    register("step_schedule", f"{hooks}.schedules:StepSchedule", description="learning rate × gamma every n")
    register("exponential_schedule", f"{hooks}.schedules:ExponentialSchedule", description="learning rate × gamma^t")
    register("cosine_schedule", f"{hooks}.schedules:CosineSchedule", description="cosine-annealed learning rate")
    register("warm_up", f"{hooks}.schedules:WarmUp", aliases=("warmup",), description="linear learning-rate warm-up")
    register("checkpoint", f"{hooks}.savers:CheckpointHook", aliases=("checkpoint_saver",),
             description="saves a resumable checkpoint when it fires, keeping the last k")
    register("clip", f"{hooks}.modifiers:Clip", description="clips parameters matching a glob after each step")
    register("scale", f"{hooks}.modifiers:Scale", description="scales parameters matching a glob after each step")


@hookimpl
def register_monitors(register):
    register("progress", "sigma_core.progress:ProgressMonitor",
             description="a progress bar per epoch on the terminal (sigma train adds it unless --quiet)")
    register("metrics", "sigma_core.metrics:MetricsMonitor",
             description="appends costs, scores, learning rate and chosen registry keys to metrics.csv and .jsonl")


@hookimpl
def register_operators(register):
    register("single_worker", "sigma_core.operators:SingleWorkerOperator", aliases=("single",),
             description="trains on one thread; pause, resume, step, stop and reset from monitors")
    register("threads", "sigma_core.workers:ThreadsOperator", aliases=("multithreaded",),
             description="data-parallel workers on threads, each with its own handler; gradient or model averaging")

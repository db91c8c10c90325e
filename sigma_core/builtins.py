"""Sigma's own components, registered through the same hooks as any plugin.

:mod:`sigma_core.plugins` registers this module directly (not through an entry
point) and attributes its components to the ``sigmann`` distribution. Going
through the public hooks keeps the core honest: anything built in could have
been a plugin.

To add a kind, add one ``@hookimpl`` function per hook, e.g.
``register_layers(register)``; keep targets lazy (``"module:attr"``) so that
discovery imports nothing heavy.
"""

from sigma_core.hookspecs import hookimpl


@hookimpl
def register_handlers(register):
    register(
        "numpy",
        "sigma_core.handlers.numpy_handler:NumpyHandler",
        rank=0,
        description="NumPy on the CPU; runs everywhere",
    )


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
    register("sgd", f"{optimisers}.sgd:GradientDescent", aliases=("gradient_descent",), description="param -= lr·g")
    register("momentum", f"{optimisers}.momentum:Momentum", description="gradient descent with classical momentum")
    register("nesterov", f"{optimisers}.momentum:Nesterov", description="gradient descent with Nesterov momentum")
    register("adagrad", f"{optimisers}.adagrad:Adagrad", description="per-element rates from summed squared gradients")
    register("adadelta", f"{optimisers}.adadelta:Adadelta", description="Zeiler's Adadelta (Algorithm 1)")
    register("rmsprop", f"{optimisers}.rmsprop:RMSProp", description="rates from a running mean of squared gradients")
    register("adam", f"{optimisers}.adam:Adam", description="Adam with bias correction")


@hookimpl
def register_initialisers(register):
    initialisers = "sigma_core.initialisers"
    register("constant", f"{initialisers}:Constant", description="every element the same value")
    register("gaussian", f"{initialisers}:Gaussian", aliases=("normal",), description="normal draws (std, mean)")
    register("uniform", f"{initialisers}:Uniform", description="uniform draws in [low, high)")
    register("xavier", f"{initialisers}:Xavier", aliases=("glorot",), description="Glorot uniform from fan-in and fan-out")
    register("he", f"{initialisers}:He", description="normal with std √(2/fan_in), for ReLU")

"""sigmann-recurrent: recurrent layers for Sigma, built on the ops seam alone.

The ``recurrent`` (alias ``rnn``) and ``lstm`` layers (:mod:`sigmann_recurrent.layers`)
run the ``rnn_sequence`` and ``lstm_sequence`` ops (:mod:`sigmann_recurrent.ops`,
forward and BPTT rules over any handler's array module), which this
distribution registers through ``register_ops`` together with the ``cpu``
handler's fused LSTM cell (:mod:`sigmann_recurrent.cpu`, numba). Registering
imports neither NumPy nor numba. :func:`Recurrent` and :func:`LSTM` are the
Python shorthands: ``Input(50, 65) + LSTM(256) + Dense(65, time_distributed=True)``.
"""

from sigma_core import hookimpl


@hookimpl
def register_layers(register):
    register("recurrent", "sigmann_recurrent.layers:Recurrent", aliases=("rnn",),
             description="Elman RNN over (batch, time, features)")
    register("lstm", "sigmann_recurrent.layers:LSTM", description="long short-term memory")


@hookimpl
def register_ops(register):
    register("rnn_sequence", "sigmann_recurrent.ops:RNNSequence", description="Elman RNN over a sequence, with BPTT")
    register("lstm_sequence", "sigmann_recurrent.ops:LSTMSequence",
             kernels={"cpu": "sigmann_recurrent.cpu:FusedLSTMSequence"},
             description="LSTM over a sequence, with BPTT; a fused numba cell on the cpu handler")


def Recurrent(size, activation="tanh", name=None, sequences=True):
    """The ``recurrent`` layer as a construct."""
    from sigma_core import Construct

    return Construct("recurrent", name, size=size, activation=activation, sequences=sequences)


def LSTM(size, name=None, sequences=True):
    """The ``lstm`` layer as a construct."""
    from sigma_core import Construct

    return Construct("lstm", name, size=size, sequences=sequences)

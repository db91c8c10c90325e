"""The ``tensorboard`` monitor (see :mod:`sigmann_tensorboard.monitor`).

Registered lazily, so plugin discovery does not import tensorboardX.
"""

from sigma_core.hookspecs import hookimpl


@hookimpl
def register_monitors(register):
    register("tensorboard", "sigmann_tensorboard.monitor:TensorBoardMonitor",
             description="TensorBoard event files: costs, scores, learning rate, histograms, config, HParams")

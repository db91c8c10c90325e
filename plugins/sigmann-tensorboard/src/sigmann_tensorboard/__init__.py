"""The ``tensorboard`` hook (see :mod:`sigmann_tensorboard.hook`).

Registered lazily, so plugin discovery does not import tensorboardX.
"""

from sigma_core import hookimpl


@hookimpl
def register_hooks(register):
    register("tensorboard", "sigmann_tensorboard.hook:TensorBoardHook",
             description="TensorBoard event files: costs, scores, learning rate, histograms, config, HParams")

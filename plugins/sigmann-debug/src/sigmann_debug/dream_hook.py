"""The ``dream`` hook: every N epochs, what the network thinks each class looks like, written into the run folder.

``[[hooks]] type = "dream"`` (``--monitor dream:every=5``) writes ``dreams/epoch_0005.png`` (or ``.npy``) in the run's
directory, the same picture as ``dreams/latest.png``, and publishes the path as the run value ``dream``.
It dreams on a copy of the network on a NumPy handler of its own, so the run's handler, its buffers and its
generator are untouched, and the run waits for it (it runs on the training thread, which alone may copy the live
network).
"""

import shutil

from sigma_core import Hook, NumpyHandler

from sigmann_debug.dream import Settings, dream, interface
from sigmann_debug.images import image_shape, write_dreams


class Dream(Hook):
    """Dreams ``targets`` (default: every class) every ``every`` epochs; Sigma's defaults otherwise."""

    argument_rules = {"every": "int >= 1", "desired_cost": "real > 0", "max_steps": "int >= 1",
                      "attempts": "int >= 1", "sigma": "real > 0", "learning_rate": "real > 0", "l2": "real >= 0",
                      "blur": "real >= 0"}

    def __init__(self, every: int = 1, targets: list | None = None, desired_cost: float = Settings.desired_cost,
                 max_steps: int = Settings.max_steps, attempts: int = Settings.attempts, sigma: float = Settings.sigma,
                 learning_rate: float = Settings.learning_rate, l2: float = Settings.l2,
                 clip: list | None = Settings.clip, blur: float = Settings.blur):
        self.every = (every, "epoch")
        self.targets = targets
        self.settings = Settings(desired_cost, max_steps, attempts, sigma, learning_rate, l2,
                                 None if clip is None else tuple(clip), blur)

    def on_epoch(self, report):
        network = self.run.network
        input_shape, outputs = interface(network)[2:]
        handler = NumpyHandler(network.handler.dtype, seed=0)
        results = [dream(network, target, self.settings, image_shape=image_shape(input_shape), seed=index,
                         handler=handler)
                   for index, target in enumerate(self.targets or range(outputs))]
        folder = self.run.directory / "dreams"
        folder.mkdir(parents=True, exist_ok=True)
        path = write_dreams(results, input_shape, folder / f"epoch_{self.run.trainer.epoch:04d}")
        shutil.copyfile(path, path.with_stem("latest"))
        self.run.publish("dream", str(path))  # for the hooks after this one (a dashboard), from the next event on

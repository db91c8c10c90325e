"""How ``sigma dream`` optimises an input, apart from the code that does it: the command's parser reads these
defaults when every ``sigma`` command is built, and must not import NumPy for them."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """How :func:`dream` optimises: Sigma's defaults (desired cost, steps, attempts, start) and regularisation that
    draws readable MNIST and sklearn digits. ``clip``: ``(low, high)``, the network's preprocessed input range, or
    None; ``blur``: a sigma in pixels (0: none), applied every ``blur_every`` steps to image-shaped inputs."""

    desired_cost: float = 0.06
    max_steps: int = 1024
    attempts: int = 2
    sigma: float = 0.01
    learning_rate: float = 0.05
    l2: float = 0.001
    clip: tuple | None = (0.0, 1.0)
    blur: float = 0.0
    blur_every: int = 4

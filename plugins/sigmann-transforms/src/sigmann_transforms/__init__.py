"""The ``[data] preprocess`` transforms (``register_transforms``): normalise, standardise, shuffle, permute.

The core keeps the container that applies transforms in order and stores what they fitted in checkpoints and
exports (``sigma_core.Preprocessing``); the transforms themselves are this distribution's, as any plugin could add
its own.
"""

from sigma_core import hookimpl

#: Rows of ``(name, "module:attr", description for sigma plugins)``.
TRANSFORMS = [
    ("normalise", "sigmann_transforms.transforms:normalise", "inputs mapped linearly from their range onto [0, 1]"),
    ("standardise", "sigmann_transforms.transforms:standardise", "inputs to zero mean and unit deviation"),
    ("shuffle", "sigmann_transforms.transforms:shuffle", "the records in a seeded random order"),
    ("permute", "sigmann_transforms.transforms:permute", "the record axes reordered, (H, W, C) to (C, H, W)"),
]


@hookimpl
def register_transforms(register):
    for name, implementation, description in TRANSFORMS:
        register(name, implementation, description=description)

"""The pytest plugin (entry point group ``pytest11``), loaded in every pytest session once sigmann-testing is installed.

It offers the ``sigma_handlers`` fixture. Being a pytest plugin also has
pytest rewrite the kit's ``assert`` statements, so a failed check shows the
values it compared. Nothing here runs plugin discovery or imports the kit
until a test asks for it: sessions that do not use Sigma pay nothing.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def sigma_handlers() -> list[str]:
    """Names of the installed handlers that can run here, in name order: the ones
    :func:`~sigmann_testing.check_layer` checks by default, so a test can assert it saw them all."""
    from .layers import available_handlers

    return available_handlers()


#: The smallest run that still trains, checkpoints and reports: 96 synthetic records in 3 classes, one dense layer,
#: SGD, 2 epochs of 9 steps on numpy. Tests of hooks and commands that need a real run file start from it.
BLOBS_RUN_FILE = """
name = "blobs"
seed = 0
[handler]
name = "numpy"
[data]
extractor = "synthetic"
n = 96
shape = 5
classes = 3
[split]
validation = 0.25
[[network.layers]]
type = "input"
shape = [5]
[[network.layers]]
type = "dense"
size = 3
[[network.layers]]
type = "softmax_ce"
[optimiser]
type = "sgd"
learning_rate = 0.1
[training]
batch_size = 8
epochs = 2
prefetch = 0
"""


@pytest.fixture
def sigma_run_file(tmp_path):
    """Write the tiny "blobs" run (:data:`BLOBS_RUN_FILE`) to ``tmp_path/run.toml`` and return its path; called as
    ``sigma_run_file("optimiser.type=momentum", ...)``, with ``--set``-style changes, so each test states only how
    its run differs instead of keeping a copy of the whole file."""
    def write(*changes: str):
        import tomllib

        from sigma_core import apply_override
        from sigmann_help import config_toml

        config = tomllib.loads(BLOBS_RUN_FILE)
        for change in changes:
            apply_override(config, change)
        path = tmp_path / "run.toml"
        path.write_text(config_toml(config))
        return path

    return write

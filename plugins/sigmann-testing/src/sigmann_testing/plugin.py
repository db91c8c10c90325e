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

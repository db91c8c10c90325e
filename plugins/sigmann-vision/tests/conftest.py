"""What the vision tests share: the handlers to run on (``close`` and ``taped`` come from sigmann-testing)."""

from __future__ import annotations

import importlib.util

import pytest

#: The handlers every op and layer is checked on: the reference and the numba one (skipped without numba).
HANDLERS = ["numpy", pytest.param("cpu", marks=pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                                                  reason="the cpu handler needs numba"))]


@pytest.fixture(params=HANDLERS)
def handler_name(request):
    """Each handler the test runs on."""
    return request.param

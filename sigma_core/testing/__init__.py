"""Test helpers for plugin distributions.

:func:`check_layer` (:mod:`sigma_core.testing.layers`) checks a layer's shapes,
determinism and gradients on every installed handler.
:mod:`sigma_core.testing.conformance` holds the handler conformance kit: a
pytest base class that a backend subclasses in its own test suite to check
that it computes what the NumPy reference handler computes, that every
gradient is right, and that it honours Sigma's dtype, random-number and
session contracts.
"""

from .conformance import CASES, TOLERANCES, HandlerConformance, OpCase, differentiable_ops, missing_gradient_cases
from .layers import check_layer

__all__ = ["check_layer", "CASES", "TOLERANCES", "HandlerConformance", "OpCase", "differentiable_ops", "missing_gradient_cases"]

"""Test helpers for handler distributions.

:mod:`sigma_core.testing.conformance` holds the handler conformance kit: a
pytest base class that a backend subclasses in its own test suite to check
that it computes what the NumPy reference handler computes, that every
gradient is right, and that it honours Sigma's dtype, random-number and
session contracts.
"""

from .conformance import CASES, TOLERANCES, HandlerConformance, OpCase, differentiable_ops, missing_gradient_cases

__all__ = ["CASES", "TOLERANCES", "HandlerConformance", "OpCase", "differentiable_ops", "missing_gradient_cases"]

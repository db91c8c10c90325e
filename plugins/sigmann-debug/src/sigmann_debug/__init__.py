"""Debugging tools for Sigma: the ``debug`` handler, which names the first op that makes a NaN, an infinity, a
wrong shape or too large a value (layer, forward or backward, iteration, element), and target maximisation
(``sigma dream``): the input a trained network takes for a class."""

from sigmann_debug.checks import Checks
from sigmann_debug.dream import DreamResult, Settings, dream
from sigmann_debug.handler import DebugHandler

__all__ = ["Checks", "DebugHandler", "DreamResult", "Settings", "dream"]

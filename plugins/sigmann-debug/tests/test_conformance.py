"""The conformance kit on the debug handler wrapping numpy and cpu: checking changes no result, dtype, random draw,
session or buffer contract of the handler it wraps."""

from sigma_core import create_handler
from sigmann_testing import HandlerConformance


class TestDebugNumpy(HandlerConformance):
    handler_factory = staticmethod(lambda dtype, seed: create_handler("debug:numpy", dtype=dtype, seed=seed))


class TestDebugCpu(HandlerConformance):
    handler_factory = staticmethod(lambda dtype, seed: create_handler("debug:cpu", dtype=dtype, seed=seed))

"""Differentiable operations: what an op is (:mod:`sigma_core.compute.ops.base`) and the core's own, registered through
``register_ops`` (:mod:`sigma_core.builtins`) exactly as a distribution registers its own.

Where an op goes: an :class:`Op` subclass with its forward rule, its VJP in ``backward`` and its conformance cases
in ``examples()``, registered by name; a backend speeds it up by overriding the raw kernels the rules call (the
core's ops) or by registering a kernel ``Op`` for its handler (a plugin's ops). docs/architecture.md, "Ops".
"""

from sigma_core.compute.ops.base import KernelOp, Op, cases, resolve

#: The core's ops: name -> ``"module:class"`` under :mod:`sigma_core.compute.ops` (docstrings: each class's).
CORE = {
    "copy": "functions:Copy", "add": "arithmetic:Add", "subtract": "arithmetic:Subtract",
    "multiply": "arithmetic:Multiply", "divide": "arithmetic:Divide", "power": "arithmetic:Power",
    "maximum": "arithmetic:Maximum", "matmul": "arithmetic:Matmul", "negative": "functions:Negative",
    "exp": "functions:Exp", "log": "functions:Log", "sqrt": "functions:Sqrt", "abs": "functions:Abs",
    "sign": "functions:Sign", "tanh": "functions:Tanh", "sigmoid": "functions:Sigmoid", "relu": "functions:Relu",
    "softplus": "functions:Softplus", "clip": "functions:Clip", "softmax": "functions:Softmax",
    "log_softmax": "functions:LogSoftmax", "where": "functions:Where", "sum": "reductions:Sum",
    "mean": "reductions:Mean", "max": "reductions:Max", "min": "reductions:Min", "reshape": "shapes:Reshape",
    "transpose": "shapes:Transpose", "getitem": "shapes:Getitem", "concatenate": "shapes:Concatenate",
    "stack": "shapes:Stack", "dense": "fused:Dense", "softmax_cross_entropy": "fused:SoftmaxCrossEntropy",
    "dropout": "fused:Dropout",
}

__all__ = ["CORE", "KernelOp", "Op", "cases", "resolve"]

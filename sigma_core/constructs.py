"""Python shorthands for the built-in layers: ``Input(28, 28) + Dense(100, "relu") + Dense(10) + SoftmaxCE()``.

Plugin layers use :class:`~sigma_core.architecture.Construct` directly: ``Construct("maxout", size=64, pieces=2)``.
"""

from __future__ import annotations

from .architecture import Construct


def Input(*shape, name=None, external="inputs"):
    return Construct("input", name, shape=shape, external=external)


def Output(name=None, external="outputs"):
    return Construct("output", name, external=external)


def Dense(size, activation="none", name=None, bias=True, time_distributed=False):
    return Construct("dense", name, size=size, activation=activation, bias=bias, time_distributed=time_distributed)


def Elementwise(activation="tanh", name=None):
    return Construct("elementwise", name, activation=activation)


def Dropout(p, name=None):
    return Construct("dropout", name, p=p)


def Concatenate(name=None):
    return Construct("concatenate", name)


def Add(name=None):
    return Construct("add", name)


def SoftmaxCE(importance=1.0, name=None, targets="targets"):
    return Construct("softmax_ce", name, importance=importance, targets=targets)


def SquaredDifference(importance=1.0, name=None, targets="targets"):
    return Construct("squared_difference", name, importance=importance, targets=targets)

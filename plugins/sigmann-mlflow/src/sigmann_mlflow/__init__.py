"""The ``mlflow`` hook (see :mod:`sigmann_mlflow.hook`) and ``sigma mlflow-replay``
(:mod:`sigmann_mlflow.undelivered`).

Registered lazily, so plugin discovery does not import MLflow (two seconds).
"""

import importlib.util

from sigma_core import hookimpl


def _has_mlflow():
    found = importlib.util.find_spec("mlflow") is not None
    return found, "" if found else "mlflow is not installed (pip install mlflow)"


@hookimpl
def register_hooks(register):
    register("mlflow", "sigmann_mlflow.hook:MlflowHook", check=_has_mlflow,
             description="logs the resolved run file, metrics per step and epoch, and artifacts to MLflow")


@hookimpl
def register_commands(cli):
    from sigmann_mlflow.undelivered import register

    register(cli)

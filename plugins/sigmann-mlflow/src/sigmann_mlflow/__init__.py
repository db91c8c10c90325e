"""The ``mlflow`` hook (see :mod:`sigmann_mlflow.hook`).

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

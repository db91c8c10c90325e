"""The ``ray`` operator (see :mod:`sigmann_ray.operator`).

Registered lazily with a ``check``, so plugin discovery does not import Ray
and asking for the operator without Ray installed is one line saying so.
"""

import importlib.util

from sigma_core import hookimpl


def ray_installed() -> tuple[bool, str]:
    if importlib.util.find_spec("ray") is None:
        return False, "Ray is not installed (pip install ray)"
    return True, ""


@hookimpl
def register_operators(register):
    register("ray", "sigmann_ray.operator:RayOperator", check=ray_installed,
             description="data-parallel workers as Ray actors, local or on a cluster (address); gradient all-reduce")

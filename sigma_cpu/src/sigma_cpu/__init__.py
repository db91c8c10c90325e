"""Sigma's numba CPU handler (a separate distribution, ``sigmann-cpu``).

Not implemented yet: the package installs but registers no handler, so the
core behaves exactly as without it. It will register ``cpu`` through the
``sigma`` entry-point group and depend on numba.
"""

"""Sigma's CUDA handler on CuPy (a separate distribution, ``sigmann-cuda``).

Not implemented yet: the package installs but registers no handler. It will
register ``cuda`` through the ``sigma`` entry-point group, import CuPy only
when that handler is selected, and report itself unavailable without a CUDA
device.
"""

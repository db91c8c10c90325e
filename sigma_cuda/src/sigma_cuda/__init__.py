"""Sigma's CUDA handler on CuPy (a separate distribution, ``sigmann-cuda``).

It registers the handler ``cuda`` (``cuda:1`` for another device) through the
``sigma`` entry-point group. Discovery imports nothing but :mod:`sigma_cuda.devices`,
which asks the NVIDIA driver through ``ctypes``; CuPy is imported only when the
handler is built (:mod:`sigma_cuda.handler`).
"""

"""Sigma's numba CPU handler (a separate distribution, ``sigmann-cpu``).

Installing it registers the ``cpu`` handler through the ``sigma`` entry-point
group (see :mod:`sigma_cpu.plugin`); ``auto`` then prefers it over the NumPy
handler. Removing it changes nothing else. Importing this package imports
neither numba nor the handler: :mod:`sigma_cpu.handler` does, on first use.
"""

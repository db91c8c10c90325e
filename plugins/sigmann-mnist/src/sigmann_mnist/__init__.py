"""The MNIST extractor (see :mod:`sigmann_mnist.mnist`), registered without importing NumPy."""

from sigma_core.hookspecs import hookimpl


@hookimpl
def register_extractors(register):
    register("mnist", "sigmann_mnist.mnist:mnist", description="MNIST digits: local folder or official download")

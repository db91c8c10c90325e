"""MNIST and its IDX file format (:mod:`sigmann_mnist.mnist`, :mod:`sigmann_mnist.idx`), registered without
importing NumPy: the ``mnist`` and ``idx`` extractors, and IDX input files for ``sigma predict``."""

from sigma_core import hookimpl


@hookimpl
def register_extractors(register):
    register("mnist", "sigmann_mnist.mnist:mnist", description="MNIST digits: local folder or official download")
    register("idx", "sigmann_mnist.idx:load_idx", description="IDX files (MNIST format), header checked")


@hookimpl
def register_readers(register):
    # MNIST's names: t10k-images-idx3-ubyte[.gz], or t10k-images.idx3-ubyte
    register("idx", "sigmann_mnist.idx:predict_inputs", aliases=("ubyte", "idx1-ubyte", "idx3-ubyte", "gz"),
             description="IDX files (.gz too), as they are")

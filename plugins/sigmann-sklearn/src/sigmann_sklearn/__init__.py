"""scikit-learn's bundled datasets as Sigma extractors (see :mod:`sigmann_sklearn.datasets`).

Registered lazily, so plugin discovery imports neither NumPy nor scikit-learn.
"""

from sigma_core import hookimpl


@hookimpl
def register_extractors(register):
    datasets = "sigmann_sklearn.datasets"
    register("sklearn", f"{datasets}:load_sklearn", description="scikit-learn's bundled datasets")
    register("iris", f"{datasets}:iris", description="Fisher's irises (150 records)")
    register("wdbc", f"{datasets}:wdbc", aliases=("breast_cancer",), description="Wisconsin breast cancer")
    register("digits", f"{datasets}:digits", description="scikit-learn's 8×8 digits")

"""The ``csv`` extractor: chosen columns of a delimited text file (``[data] extractor = "csv"``).

:func:`read_csv` is public too: ``sigma predict`` (``sigmann-predict``) reads CSV inputs with it.
"""

from sigma_core import hookimpl


@hookimpl
def register_extractors(register):
    register("csv", "sigmann_csv.extractor:read_csv", description="columns of a delimited text file")


def __getattr__(name):  # read_csv without importing NumPy when only discovery runs
    if name in ("read_csv", "parse_columns"):
        from . import extractor

        return getattr(extractor, name)
    raise AttributeError(f"module 'sigmann_csv' has no attribute {name!r}")

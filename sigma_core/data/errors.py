"""The one error type of the data path.

Kept in this package (rather than :mod:`sigma_core.errors`) so the data path
can grow without touching the shared module; it is still a
:class:`~sigma_core.errors.SigmaError`, so the CLI prints it as one line.
"""

from sigma_core.errors import SigmaError


class DataError(SigmaError):
    """A dataset or data file is unusable; the message names the section, label or file."""

"""The one error type of the data path, a :class:`~sigma_core.errors.SigmaError` so the CLI prints one line."""

from sigma_core.errors import SigmaError


class DataError(SigmaError):
    """A dataset or data file is unusable; the message names the section, label or file."""

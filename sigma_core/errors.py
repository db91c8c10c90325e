"""Every error a user can fix is a :class:`SigmaError` whose message names the culprit (key, layer, file, ...).

The CLI prints one as one line and exits 2; anything else is a bug and shows its traceback.
"""


class SigmaError(Exception):
    """Base class: a problem the user can act on, described in one line."""


class ConfigError(SigmaError):
    """A run file or override is malformed; the message names the key."""


class ShapeError(SigmaError, ValueError):
    """Operands do not fit; the message names the op and the shapes."""


class UnknownComponentError(SigmaError, KeyError):
    """A layer, handler, optimiser, ... name nobody registered."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0])


class ComponentClashError(SigmaError):
    """Two distributions register a component under the same name."""


class HandlerUnavailableError(SigmaError):
    """A handler asked for by name is installed but cannot run here."""


class PluginError(SigmaError):
    """A plugin failed to load while strict plugin loading is on."""


class ArchitectureError(SigmaError):
    """A network graph is invalid: cycle, unknown alias, shape mismatch."""


class NonFiniteError(SigmaError, FloatingPointError):
    """Training produced NaN or Inf; the message says where."""


class ComponentLoadError(SigmaError, ImportError):
    """A registered component's lazy implementation could not be imported; names the component."""


def one_line(text) -> str:
    """``text`` with its line breaks and runs of white space as single spaces."""
    return " ".join(str(text).split())


def first_non_finite(values) -> str:
    """``"nan at index [1, 2]"``: the first NaN or infinity of a NumPy array that holds one, for error messages."""
    import numpy  # only on this error path: importing the errors stays cheap

    index = tuple(int(i) for i in numpy.unravel_index(numpy.argmin(numpy.isfinite(values)), values.shape))
    return f"{values[index]} at index {list(index)}"


def describe(error: BaseException) -> str:
    """``"Type: message"`` on one line, for an error that is reported rather than raised."""
    return one_line(f"{type(error).__name__}: {error}")

"""Choosing the computation handler: by name, or ``auto`` for the best that runs.

Whether a handler can run is asked cheaply first (the ``check`` it was registered with, no heavy imports), then
by the loaded class's ``availability()``, which may look at the hardware.
"""

import logging
import os
from typing import Any

from sigma_core import plugins
from sigma_core.errors import ComponentLoadError, HandlerUnavailableError, SigmaError, describe, one_line

AUTO = "auto"

_log = logging.getLogger("sigma")


def handler_from_environment() -> str | None:
    """``SIGMA_HANDLER``, the handler a user's shell asks for: below ``--handler``, above a run file's name."""
    return os.environ.get("SIGMA_HANDLER", "").strip() or None


def create_handler(name: str | None = None, *, dtype: str = "float32", seed: int | None = None) -> Any:
    """Construct the handler ``name`` (None: ``SIGMA_HANDLER``, else ``auto``, the best available). ``name:N`` picks
    device N of a handler that has several (``cuda:1``); ``name:inner`` builds a wrapping handler, one whose class
    has ``around(handler)``, around the handler ``inner`` (``debug:cpu``, ``debug:cuda:1``: sigmann-debug)."""
    name = (name or "").strip() or handler_from_environment() or AUTO
    name, colon, device = name.partition(":")
    inner = colon and device.partition(":")[0] in {AUTO, *(c.name for c in plugins.components("handler"))}
    if colon and not device.isdigit() and not inner:
        raise SigmaError(f"handler '{name}:{device}': the part after ':' must be a device number, as in '{name}:1'")
    if name == AUTO:
        component = _best_available()
        _log.info("handler auto -> %s (fastest available)", component.name)
    else:
        component = plugins.get("handler", name)  # UnknownComponentError lists the names
        available, reason = handler_availability(component.name)
        if not available:
            names = ", ".join(sorted(available_handlers())) or "none"
            raise HandlerUnavailableError(f"handler {name!r} cannot run here: {reason} (available: {names})")
        _log.info("handler %s", component.name)
    cls = component.load()
    if inner and hasattr(cls, "around"):
        return cls.around(create_handler(device, dtype=dtype, seed=seed))
    if colon and not getattr(cls, "takes_device", False):
        raise SigmaError(f"handler {component.name!r} has no devices to choose from (drop ':{device}')")
    return cls(dtype=dtype, seed=seed, **({"device": int(device)} if colon else {}))


def _ranked() -> list[plugins.Component]:
    """The installed handlers, highest rank first, ties by name: the order ``auto`` tries them in."""
    return sorted(plugins.components("handler"), key=lambda c: (-c.rank, c.name))


def _best_available() -> plugins.Component:
    reasons = []
    for component in _ranked():
        available, reason = handler_availability(component.name)
        if available and not _wraps(component):
            return component
        reasons.append(f"{component.name}: {reason}")
    raise HandlerUnavailableError(f"no handler can run here ({'; '.join(reasons) or 'none registered'})")


def available_handlers() -> list[str]:
    """Names of the installed handlers that can run here, best-ranked first (ties by name): what ``auto`` picks from."""
    return [c.name for c in _ranked() if handler_availability(c.name)[0] and not _wraps(c)]


def _wraps(component) -> bool:
    """Whether an available handler wraps another (``debug:cpu``): never ``auto``'s pick, which it would wrap."""
    return hasattr(component.load(), "around")


def handler_availability(name: str) -> tuple[bool, str]:
    """Whether the installed handler ``name`` can run here, and if not, why (one line; unknown names raise, naming
    the choices). A handler that fails to import is unavailable: a broken plugin must not stop ``auto``."""
    component = plugins.get("handler", name)
    available, reason = component.availability()
    if not available:
        return False, reason
    try:
        cls = component.load()
    except ComponentLoadError as exc:
        _log.warning("%s", exc)
        return False, f"cannot be imported ({describe(exc.__cause__)})"
    try:
        available, reason = cls.availability() if hasattr(cls, "availability") else (True, "")
    except Exception as exc:
        return False, f"availability check failed: {describe(exc)}"
    return bool(available), one_line(reason)

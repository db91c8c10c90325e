"""Reading and writing the hook registry by identifier, with errors that name it and the hook."""

from __future__ import annotations

from sigma_core import HookError

from .registry import Registry

__all__ = ["HookError", "read", "read_number", "write"]


def read(resolver, identifier: str, who: str = "a hook"):
    """The single value ``identifier`` names (wildcards allowed, but exactly one must match)."""
    matches = resolver.resolve_get(identifier)
    if not matches:
        raise HookError(f"{who}: no registry value matches {identifier!r}")
    if len(matches) > 1:
        names = ", ".join(full_id for full_id, _ in matches[:5])
        raise HookError(f"{who}: {identifier!r} matches several values ({names}); name one")
    return matches[0][1]


def read_number(resolver, identifier: str, who: str = "a hook") -> float:
    value = read(resolver, identifier, who)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise HookError(f"{who}: {identifier!r} is {type(value).__name__}, not a number") from None


def write(resolver, identifier: str, value) -> None:
    """Set the literal ``identifier``, creating missing levels (unlike ``set_path``): hooks publish new names."""
    *parents, key = identifier.split(".")
    node = resolver.root
    for name in parents:
        if name not in node:
            node[name] = Registry()
        node = node[name]
    node[key] = value

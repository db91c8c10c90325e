"""Nested registries of everything a run exposes, and a resolver to query them.

Hooks name what they read and write by dot identifiers with ``*`` wildcards and
``<tag>`` filters, so "the weights of every fully connected layer" is one string
in a run file: ``network.layers.*<fc>.weights``. Keys are *type protected*
(writing a string where a float lives raises :class:`RegistryTypeError` naming
the key, instead of crashing the optimiser later), and resolved identifiers
are cached until a *structural* change (a key added or removed, a sub-registry
replaced, tags changed); overwriting a plain value every iteration is not one.
"""

from __future__ import annotations

import copy
import numbers
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from sigma_core import NDArray, SigmaError

__all__ = ["DuplicateKeyError", "Registry", "RegistryError", "RegistryKeyError", "RegistryResolver",
           "RegistryTypeError", "copy_value", "registry_from_dict"]

_MISSING = object()
# '.', '*' and '<...>' have a meaning in identifiers, so a key holding one could never be named.
_FORBIDDEN_IN_KEY = re.compile(r"[.*<>]")


class RegistryError(SigmaError):
    """A registry was used wrongly: a malformed identifier, a registry put in two places."""


class RegistryKeyError(RegistryError, KeyError):
    """A key or dot identifier names nothing; the message gives the full identifier."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0])


class DuplicateKeyError(RegistryKeyError):
    """:meth:`Registry.add` was given a key that already exists."""


class RegistryTypeError(RegistryError, TypeError):
    """A value's type does not match the type associated with its key."""


class Registry(MutableMapping):
    """A type-protected mapping of keys to values or to nested registries.

    A registry lives in one place only (insert ``deep_copy()`` to put it in two),
    so its :attr:`identifier`, the dot path errors name keys by, is never ambiguous.
    """

    def __init__(self, tags: Iterable[str] = (), *, check_types: bool = True):
        self.check_types = check_types
        self._values: dict[str, Any] = {}
        self._types: dict[str, type] = {}
        self._tags = frozenset(tags)
        self._parent: Registry | None = None
        self._name: str | None = None  # this registry's key in its parent
        self._version = 0  # structural changes in this subtree

    @property
    def parent(self) -> Registry | None:
        return self._parent

    @property
    def root(self) -> Registry:
        return self if self._parent is None else self._parent.root

    @property
    def identifier(self) -> str:
        """The dot path from the root to this registry ('' for a root)."""
        return "" if self._parent is None else self._parent.full_key(self._name)

    @property
    def tags(self) -> frozenset[str]:  # frozen, so every change goes through the setter and bumps the version
        return self._tags

    @tags.setter
    def tags(self, tags: Iterable[str]) -> None:
        self._tags = frozenset(tags)
        self._bump()

    def full_key(self, key: str) -> str:
        prefix = self.identifier
        return f"{prefix}.{key}" if prefix else key

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise RegistryKeyError(f"registry has no key {self.full_key(key)!r}") from None

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        self.remove(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        tags = f"tags={sorted(self._tags)!r}, " if self._tags else ""
        return f"Registry({tags}{self._values!r})"

    def set(self, key: str, value: Any, type: type | None = None) -> None:
        """Set ``key``, type checked against ``type``, else the key's type, else fixing the value's own.

        Ints widen to a float key; ``None`` fits any key. Unchecked, the type follows the latest value.
        """
        self._commit(key, *self._prepare(key, value, type))

    def add(self, key: str, value: Any, type: type | None = None) -> None:
        """Like :meth:`set`, but refuses an existing key."""
        if key in self._values:
            raise DuplicateKeyError(f"registry already has a key {self.full_key(key)!r}")
        self.set(key, value, type)

    def remove(self, key: str) -> Any:
        value = self[key]
        del self._values[key]
        self._types.pop(key, None)
        if isinstance(value, Registry):
            value._parent = value._name = None
        self._bump()
        return value

    def get_type(self, key: str) -> type | None:
        """The type associated with ``key`` (None if it only ever held None)."""
        self[key]  # raises, naming the key, if absent
        return self._types.get(key)

    def values_matching(self, pattern: str, type: type | None = None) -> list:
        """Values at this level whose key ``re.search``-es ``pattern`` (as Sigma's ``GetAllValues``)."""
        regex = re.compile(pattern)
        return [value for key, value in self._values.items()
                if regex.search(key) and (type is None or isinstance(value, type))]

    def get_path(self, identifier: str, default: Any = _MISSING) -> Any:
        """The value at a dot identifier such as ``"network.layers.fc1.weights"``."""
        *parents, key = identifier.split(".")
        try:
            return self._walk(parents)[key]
        except RegistryKeyError:
            if default is _MISSING:
                raise
            return default

    def set_path(self, identifier: str, value: Any, type: type | None = None) -> None:
        """Set the value at a dot identifier; levels are not created, so a misspelt one fails loudly."""
        *parents, key = identifier.split(".")
        self._walk(parents).set(key, value, type)

    def _walk(self, names: list[str]) -> Registry:
        node = self
        for name in names:
            child = node[name]
            if not isinstance(child, Registry):
                raise RegistryKeyError(f"{node.full_key(name)!r} holds a {type(child).__name__}, not a registry")
            node = child
        return node

    def deep_copy(self) -> Registry:
        """An independent copy (a root of its own) with the same keys, types and tags."""
        clone = Registry(self._tags, check_types=self.check_types)
        clone._types = dict(self._types)
        for key, value in self._values.items():
            if isinstance(value, Registry):
                value = value.deep_copy()
                value._parent, value._name = clone, key
            else:
                value = copy_value(value)
            clone._values[key] = value
        return clone

    def __deepcopy__(self, memo) -> Registry:
        return self.deep_copy()

    def _prepare(self, key: str, value: Any, explicit: type | None) -> tuple[Any, type | None]:
        """Validate a write; return (value to store, type to associate). ``resolve_set`` checks all first."""
        if not isinstance(key, str) or not key or _FORBIDDEN_IN_KEY.search(key):
            raise RegistryError(f"invalid registry key {key!r} under {self.identifier or 'the root'!r}: "
                                "keys are non-empty strings without '.', '*', '<' or '>'")
        if isinstance(value, Registry):
            self._check_attachable(key, value)
        current = self._types.get(key)
        if not self.check_types:
            return value, explicit or (_natural_type(value) if value is not None else current)
        if value is None:
            return None, explicit or current
        for expected in (explicit, current):
            if expected is not None:
                value = self._coerce(key, value, expected)
        return _normalise_number(value), explicit or current or _natural_type(value)

    def _coerce(self, key: str, value: Any, expected: type) -> Any:
        # A bool is not a number here: a flag written where a count or a rate lives is a mistake.
        is_bool = isinstance(value, bool)
        if isinstance(value, expected) and not (is_bool and expected in (int, float)):
            return value
        if not is_bool and expected is float and isinstance(value, numbers.Real):
            return float(value)
        if not is_bool and expected is int and isinstance(value, numbers.Integral):
            return int(value)
        raise RegistryTypeError(f"registry key {self.full_key(key)!r} holds {expected.__name__}, cannot set it "
                                f"to a {type(value).__name__} (registries are type protected; use "
                                "check_types=False to allow it)")

    def _check_attachable(self, key: str, child: Registry) -> None:
        if child._parent is self and child._name == key:
            return  # setting a sub-registry where it already is
        if child._parent is not None:
            raise RegistryError(f"cannot insert registry {child.identifier!r} at {self.full_key(key)!r}: it already "
                                "lives elsewhere; remove it there first or insert a deep_copy()")
        if self.root is child:  # child is a root, so this is the only way it can be an ancestor
            raise RegistryError(f"inserting a registry at {self.full_key(key)!r} would make a cycle")

    def _commit(self, key: str, value: Any, associated: type | None) -> None:
        old = self._values.get(key, _MISSING)
        if isinstance(old, Registry) and old is not value:
            old._parent = old._name = None
        if isinstance(value, Registry):
            value._parent, value._name = self, key
        self._values[key] = value
        if associated is None:
            self._types.pop(key, None)
        else:
            self._types[key] = associated
        if old is _MISSING or isinstance(old, Registry) or isinstance(value, Registry):
            self._bump()

    def _bump(self) -> None:
        """Record a structural change here and in every ancestor, for resolver caches."""
        node = self
        while node is not None:
            node._version += 1
            node = node._parent


class RegistryResolver:
    """Resolves dot identifiers against a root registry.

    Each level is a key or a pattern (``*`` matches any run of characters),
    optionally with ``<tag>`` or ``<a,b>``: only sub-registries carrying all
    those tags match. Matches are cached; values are always read fresh.
    """

    def __init__(self, root: Registry):
        self.root = root
        self._cache: dict[str, list[tuple[Registry, str, str]]] = {}
        self._cache_version = root._version

    def resolve_get(self, identifier: str) -> list[tuple[str, Any]]:
        """``[(full_id, value), ...]`` for every key the identifier matches (maybe none)."""
        return [(full_id, registry._values[key]) for registry, key, full_id in self._matches(identifier)]

    def resolve_set(self, identifier: str, value: Any, type: type | None = None) -> list[str]:
        """Set every existing key the identifier matches (all or none); return their full ids."""
        matches = self._matches(identifier)
        if isinstance(value, Registry) and len(matches) > 1:
            raise RegistryError(f"{identifier!r} matches {len(matches)} keys, "
                                "but a registry can live in one place only")
        prepared = [registry._prepare(key, value, type) for registry, key, _ in matches]
        for (registry, key, _), (stored, associated) in zip(matches, prepared):
            registry._commit(key, stored, associated)
        return [full_id for _, _, full_id in matches]

    def _matches(self, identifier: str) -> list[tuple[Registry, str, str]]:
        if self.root._version != self._cache_version:
            self._cache.clear()
            self._cache_version = self.root._version
        if identifier not in self._cache:
            self._cache[identifier] = self._resolve(identifier)
        return self._cache[identifier]

    def _resolve(self, identifier: str) -> list[tuple[Registry, str, str]]:
        if not isinstance(identifier, str) or not identifier:
            raise RegistryError(f"malformed registry identifier {identifier!r}")
        *inner, last = [_Level(text, identifier) for text in identifier.split(".")]
        frontier = [(self.root, "")]
        for level in inner:
            frontier = [(value, f"{prefix}{key}.") for registry, prefix in frontier
                        for key, value in level.select(registry) if isinstance(value, Registry)]
        return [(registry, key, f"{prefix}{key}") for registry, prefix in frontier for key, _ in last.select(registry)]


class _Level:
    """One level of an identifier: a key pattern and the tags it requires."""

    def __init__(self, text: str, identifier: str):
        match = re.fullmatch(r"([^<>]+)(?:<([^<>]+)>)?", text)
        if match is None:
            raise RegistryError(f"malformed registry identifier {identifier!r}: level {text!r} should be "
                                "a key or pattern with an optional <tag> or <tag1,tag2> suffix")
        name, tags = match.groups()
        self.pattern = re.compile(".*".join(re.escape(part) for part in name.split("*")))
        self.tags = frozenset(tag.strip() for tag in tags.split(",")) if tags else frozenset()

    def select(self, registry: Registry) -> Iterator[tuple[str, Any]]:
        for key, value in registry._values.items():
            tagged = not self.tags or isinstance(value, Registry) and self.tags <= value.tags
            if tagged and self.pattern.fullmatch(key):
                yield key, value


def registry_from_dict(d: Mapping, tags: Iterable[str] = ()) -> Registry:
    """A registry from a nested mapping (mappings become sub-registries; registries keep their tags)."""
    registry = Registry(tags)
    for key, value in d.items():
        if isinstance(value, Mapping) and not isinstance(value, Registry):
            value = registry_from_dict(value)
        registry.set(key, value)
    return registry


def copy_value(value: Any) -> Any:
    """An independent copy: NDArrays by their handler (outside any tape or buffer session), else deepcopy."""
    if isinstance(value, NDArray):
        handler = value.handler
        with handler.no_grad():
            return handler.keep(handler.copy(value))
    return copy.deepcopy(value)


def _natural_type(value: Any) -> type:
    """The type a first value fixes for its key; NumPy scalars count as int/float."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float
    return type(value)


def _normalise_number(value: Any) -> Any:
    natural = _natural_type(value)
    return natural(value) if natural in (int, float) and type(value) is not natural else value

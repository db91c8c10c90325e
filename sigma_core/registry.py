"""Nested registries of everything a run exposes, and a resolver to query them.

Sigma's training is steered by hooks that read and write one global registry:
``network.layers.fc1.weights``, ``optimiser.learning_rate``, ``epoch``,
``trainer.cost``, a ``shared`` area, ... A hook names what it wants with a dot
identifier, optionally with ``*`` wildcards and ``<tag>`` filters, so that
"the weights of every fully connected layer" is one string in a config file:
``network.layers.*<fc>.weights``.

Two things make this safe to use from config rather than code:

* **Type protection.** Once a key holds a value of some type, setting a value
  of another type raises :class:`RegistryTypeError` naming the full key. A typo
  in a hook's config (writing a string where the learning rate lives) fails at
  once instead of crashing the optimiser later. Integers may widen to float,
  and numbers are stored as Python ``int``/``float`` so a key's type does not
  depend on whether a value came from NumPy or from a literal.
* **Cheap repeated queries.** :class:`RegistryResolver` caches what each
  identifier resolved to, since hooks ask the same question every iteration.
  Every registry counts the structural changes below it (a key added or
  removed, a sub-registry inserted or replaced, tags changed); the resolver
  drops its cache when its root's count moves. Overwriting a plain value is not
  structural, so the per-iteration writes of costs and parameters keep the
  cache warm.
"""

from __future__ import annotations

import copy
import numbers
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from .errors import SigmaError
from .ndarray import NDArray

__all__ = [
    "DuplicateKeyError",
    "Registry",
    "RegistryError",
    "RegistryKeyError",
    "RegistryResolver",
    "RegistryTypeError",
    "registry_from_dict",
]

_MISSING = object()
# '.' separates levels, '*' is the wildcard and '<...>' holds tag filters, so
# none of them may appear in a key; otherwise some key could never be named.
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

    A registry inserted into another becomes its child: :attr:`parent` and
    :attr:`root` follow the chain up, and :attr:`identifier` is its dot path
    from the root, which is how error messages name the full key. A registry
    lives in one place only (insert ``registry.deep_copy()`` to put it in two),
    so that chain is never ambiguous.

    ``registry[key] = value`` overwrites; :meth:`add` refuses an existing key.
    Both are type checked unless ``check_types=False`` (see :meth:`set`).
    Keys are single levels; use :meth:`get_path`/:meth:`set_path` for dot
    identifiers and :class:`RegistryResolver` for wildcards and tags.
    """

    def __init__(self, tags: Iterable[str] = (), *, check_types: bool = True):
        self.check_types = check_types
        self._values: dict[str, Any] = {}
        self._types: dict[str, type] = {}
        self._tags = frozenset(tags)
        self._parent: Registry | None = None
        self._name: str | None = None  # this registry's key in its parent
        self._version = 0  # structural changes in this subtree; see the module docstring

    # -- place in the hierarchy ---------------------------------------------------------
    @property
    def parent(self) -> Registry | None:
        return self._parent

    @property
    def root(self) -> Registry:
        node = self
        while node._parent is not None:
            node = node._parent
        return node

    @property
    def identifier(self) -> str:
        """The dot path from the root to this registry ('' for a root)."""
        names = []
        node = self
        while node._parent is not None:
            names.append(node._name)
            node = node._parent
        return ".".join(reversed(names))

    @property
    def tags(self) -> frozenset[str]:
        """Labels that ``<tag>`` filters match, e.g. ``{"layer", "fc"}``.

        Frozen so that every change goes through the setter, which tells
        resolvers their cached tag matches may be stale.
        """
        return self._tags

    @tags.setter
    def tags(self, tags: Iterable[str]) -> None:
        self._tags = frozenset(tags)
        self._bump()

    def full_key(self, key: str) -> str:
        """``key``'s dot identifier from the root, as error messages show it."""
        prefix = self.identifier
        return f"{prefix}.{key}" if prefix else key

    # -- the mapping ----------------------------------------------------------------------
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
        """Set ``key`` to ``value``, overwriting, and associate a type with the key.

        The associated type is ``type`` if given, else the key's existing one,
        else the value's own. With ``check_types`` on, a value that is not an
        instance of it raises :class:`RegistryTypeError`, except that an int
        widens to a float key. ``None`` is a placeholder: it fits any key and
        does not fix a type. With ``check_types`` off nothing is checked and the
        association follows the latest value (or ``type``).
        """
        self._commit(key, *self._prepare(key, value, type))

    def add(self, key: str, value: Any, type: type | None = None) -> None:
        """Like :meth:`set`, but a key that already exists raises :class:`DuplicateKeyError`."""
        if key in self._values:
            raise DuplicateKeyError(f"registry already has a key {self.full_key(key)!r}")
        self.set(key, value, type)

    def remove(self, key: str) -> Any:
        """Remove ``key`` and the type associated with it; return its value."""
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
        """Values whose key matches the regex ``pattern`` (``re.search``, as Sigma's
        ``GetAllValues``: anchor with ``^...$`` for whole keys), optionally only
        instances of ``type``. Looks at this level only."""
        regex = re.compile(pattern)
        return [
            value
            for key, value in self._values.items()
            if regex.search(key) and (type is None or isinstance(value, type))
        ]

    # -- dot identifiers ---------------------------------------------------------------
    def get_path(self, identifier: str, default: Any = _MISSING) -> Any:
        """The value at a dot identifier such as ``"network.layers.fc1.weights"``.

        A missing level raises :class:`RegistryKeyError` naming it, unless a
        ``default`` is given.
        """
        *parents, key = identifier.split(".")
        try:
            return self._walk(parents)[key]
        except RegistryKeyError:
            if default is _MISSING:
                raise
            return default

    def set_path(self, identifier: str, value: Any, type: type | None = None) -> None:
        """Set the value at a dot identifier; every level above the last must exist.

        Intermediate registries are not created on the fly, so a misspelt
        level fails loudly instead of growing a parallel tree.
        """
        *parents, key = identifier.split(".")
        self._walk(parents).set(key, value, type)

    def _walk(self, names: list[str]) -> Registry:
        node = self
        for name in names:
            child = node[name]
            if not isinstance(child, Registry):
                raise RegistryKeyError(
                    f"{node.full_key(name)!r} holds a {_type_name(child)}, not a registry"
                )
            node = child
        return node

    # -- copies ------------------------------------------------------------------------
    def deep_copy(self) -> Registry:
        """An independent copy: same keys, types, tags and ``check_types``, new values.

        Sub-registries are copied recursively and the copy is a root of its
        own. NDArrays are copied by their handler (on its device, outside any
        tape and buffer session, so a snapshot taken mid-iteration stays
        readable); other values go through :func:`copy.deepcopy`. Arrays nested
        inside plain containers would be deep-copied along with their handler,
        so publish arrays as registry values directly.
        """
        clone = Registry(self._tags, check_types=self.check_types)
        clone._types = dict(self._types)
        for key, value in self._values.items():
            if isinstance(value, Registry):
                value = value.deep_copy()
                value._parent, value._name = clone, key
            else:
                value = _copy_value(value)
            clone._values[key] = value
        return clone

    def __deepcopy__(self, memo) -> Registry:
        return self.deep_copy()

    # -- internals ---------------------------------------------------------------------
    def _prepare(self, key: str, value: Any, explicit: type | None) -> tuple[Any, type | None]:
        """Validate a write without performing it; return (value to store, type to associate).

        Split from :meth:`_commit` so that :meth:`RegistryResolver.resolve_set`
        can check every match before changing any.
        """
        if not isinstance(key, str) or not key or _FORBIDDEN_IN_KEY.search(key):
            raise RegistryError(
                f"invalid registry key {key!r} under {self.identifier or 'the root'!r}: "
                "keys are non-empty strings without '.', '*', '<' or '>'"
            )
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
        # A bool is not a number here, whatever Python's class tree says: a flag
        # written where a count or a rate lives is a mistake worth reporting.
        is_bool = isinstance(value, bool)
        if isinstance(value, expected) and not (is_bool and expected in (int, float)):
            return value
        if not is_bool and expected is float and isinstance(value, numbers.Real):
            return float(value)
        if not is_bool and expected is int and isinstance(value, numbers.Integral):
            return int(value)
        raise RegistryTypeError(
            f"registry key {self.full_key(key)!r} holds {expected.__name__}, "
            f"cannot set it to a {_type_name(value)} "
            "(registries are type protected; use check_types=False to allow it)"
        )

    def _check_attachable(self, key: str, child: Registry) -> None:
        if child._parent is self and child._name == key:
            return  # setting a sub-registry where it already is
        if child._parent is not None:
            raise RegistryError(
                f"cannot insert registry {child.identifier!r} at {self.full_key(key)!r}: "
                "it already lives elsewhere; remove it there first or insert a deep_copy()"
            )
        node = self
        while node is not None:
            if node is child:
                raise RegistryError(f"inserting a registry at {self.full_key(key)!r} would make a cycle")
            node = node._parent

    def _commit(self, key: str, value: Any, associated: type | None) -> None:
        old = self._values.get(key, _MISSING)
        structural = old is _MISSING or isinstance(old, Registry) or isinstance(value, Registry)
        if isinstance(old, Registry) and old is not value:
            old._parent = old._name = None
        if isinstance(value, Registry):
            value._parent, value._name = self, key
        self._values[key] = value
        if associated is None:
            self._types.pop(key, None)
        else:
            self._types[key] = associated
        if structural:
            self._bump()

    def _bump(self) -> None:
        """Record a structural change here and in every ancestor, for resolver caches."""
        node = self
        while node is not None:
            node._version += 1
            node = node._parent


class RegistryResolver:
    """Resolves dot identifiers with wildcards and tag filters against a root registry.

    Syntax, per ``.``-separated level: a literal key; a pattern where ``*``
    matches any run of characters (``*``, ``trainer*``, ``*-dense``); and an
    optional ``<tag>`` or ``<a,b>`` suffix that only matches sub-registries
    carrying all the listed tags. ``network.layers.*<fc>.weights`` is the
    weights of every layer registry tagged ``fc``.

    Results are in insertion order, with full identifiers relative to
    :attr:`root`. What each identifier resolved to is cached until the root
    reports a structural change (see the module docstring); values themselves
    are always read fresh.
    """

    def __init__(self, root: Registry):
        self.root = root
        self._cache: dict[str, list[tuple[Registry, str, str]]] = {}
        self._cache_version = root._version

    def resolve_get(self, identifier: str) -> list[tuple[str, Any]]:
        """``[(full_id, value), ...]`` for every key the identifier matches (maybe none)."""
        return [(full_id, registry._values[key]) for registry, key, full_id in self._matches(identifier)]

    def resolve_set(self, identifier: str, value: Any, type: type | None = None) -> list[str]:
        """Set every existing key the identifier matches to ``value``; return their full ids.

        All matches are type checked before any is changed, so a bad value
        leaves the registry as it was. Keys are not created: use
        :meth:`Registry.set_path` for that.
        """
        matches = self._matches(identifier)
        if isinstance(value, Registry) and len(matches) > 1:
            raise RegistryError(
                f"{identifier!r} matches {len(matches)} keys, but a registry can live in one place only"
            )
        prepared = [registry._prepare(key, value, type) for registry, key, _ in matches]
        for (registry, key, _), (stored, associated) in zip(matches, prepared):
            registry._commit(key, stored, associated)
        return [full_id for _, _, full_id in matches]

    def _matches(self, identifier: str) -> list[tuple[Registry, str, str]]:
        if self.root._version != self._cache_version:
            self._cache.clear()
            self._cache_version = self.root._version
        matches = self._cache.get(identifier)
        if matches is None:
            matches = self._cache[identifier] = self._resolve(_parse(identifier))
        return matches

    def _resolve(self, levels: list[_Level]) -> list[tuple[Registry, str, str]]:
        frontier = [(self.root, "")]
        *inner, last = levels
        for level in inner:
            frontier = [
                (value, f"{prefix}{key}.")
                for registry, prefix in frontier
                for key, value in level.select(registry)
                if isinstance(value, Registry)
            ]
        return [
            (registry, key, f"{prefix}{key}")
            for registry, prefix in frontier
            for key, _ in last.select(registry)
        ]


class _Level:
    """One parsed level of an identifier: a key pattern and the tags it requires."""

    def __init__(self, text: str, identifier: str):
        match = re.fullmatch(r"([^<>]+)(?:<([^<>]+)>)?", text)
        if match is None:
            raise RegistryError(
                f"malformed registry identifier {identifier!r}: level {text!r} "
                "should be a key or pattern with an optional <tag> or <tag1,tag2> suffix"
            )
        name, tags = match.groups()
        self.literal = None if "*" in name else name
        self.pattern = re.compile(".*".join(re.escape(part) for part in name.split("*")))
        self.tags = frozenset(tag.strip() for tag in tags.split(",")) if tags else frozenset()

    def select(self, registry: Registry) -> Iterator[tuple[str, Any]]:
        if self.literal is not None:
            candidates = [self.literal] if self.literal in registry._values else []
        else:
            candidates = [key for key in registry._values if self.pattern.fullmatch(key)]
        for key in candidates:
            value = registry._values[key]
            if not self.tags or (isinstance(value, Registry) and self.tags <= value.tags):
                yield key, value


def _parse(identifier: str) -> list[_Level]:
    if not isinstance(identifier, str) or not identifier:
        raise RegistryError(f"malformed registry identifier {identifier!r}")
    return [_Level(text, identifier) for text in identifier.split(".")]


def registry_from_dict(d: Mapping, tags: Iterable[str] = ()) -> Registry:
    """Build a registry from a nested mapping: nested mappings become sub-registries.

    ``tags`` go on the top registry. Registries among the values are inserted
    as they are (keeping their own tags), which is how a publisher tags parts
    of the tree, e.g. each layer with ``{"layer", "fc"}``.
    """
    registry = Registry(tags)
    for key, value in d.items():
        if isinstance(value, Mapping) and not isinstance(value, Registry):
            value = registry_from_dict(value)
        registry.set(key, value)
    return registry


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


def _copy_value(value: Any) -> Any:
    if isinstance(value, NDArray):
        handler = value.handler
        with handler.no_grad():
            return handler.keep(handler.copy(value))
    return copy.deepcopy(value)


def _type_name(value: Any) -> str:
    return type(value).__name__

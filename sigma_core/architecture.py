"""Constructs and architectures: a network described before it exists.

A :class:`Construct` is a light placeholder for a layer: its type name, its
meta-parameters and which constructs feed it. Nothing is allocated until a
:class:`~sigma_core.network.Network` instantiates the layers on a handler.

Linear stacks use ``+`` (``Input(4) + Dense(10, "relu") + Dense(3)``) and
``n * construct`` repeats deep copies. Any acyclic graph can be linked by hand
with :meth:`Construct.link` and collected in an :class:`Architecture`.
Names containing ``#`` are numbered by position when the architecture is
resolved (``"#-dense"`` becomes ``"2-dense"``), as in Sigma.
"""

from __future__ import annotations

import copy
from collections import Counter

from . import plugins
from .config import require
from .errors import ArchitectureError, UnknownComponentError


class Construct:
    """Placeholder for one layer: ``Construct("dense", size=10, activation="relu")``."""

    def __init__(self, layer_type: str, name: str | None = None, **params):
        self.layer_type = layer_type
        self.name = name or f"#-{layer_type}"
        if self.name.count("#") > 1:
            raise ArchitectureError(f"construct name {self.name!r} may contain at most one '#'")
        self.params = params
        self.inputs: list[Construct] = []
        self.where: str | None = None  # the run-file key it came from, for errors

    def link(self, *sources: "Construct") -> "Construct":
        """Feed this construct from ``sources`` (in order); returns self for chaining."""
        for source in sources:
            if any(s is source for s in self.inputs):
                raise ArchitectureError(f"construct {self.name!r} is already linked from {source.name!r}")
            self.inputs.append(source)
        return self

    def __add__(self, other):
        return Architecture([self]) + other

    def __rmul__(self, count: int):
        return count * Architecture([self])

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"Construct({self.layer_type!r}, name={self.name!r}{', ' if params else ''}{params})"


class Architecture:
    """Constructs in declaration order, with their links; validated as a DAG."""

    def __init__(self, constructs=()):
        self.constructs: list[Construct] = list(constructs)

    def __add__(self, other):
        """Stack: ``other``'s first construct is fed by this one's last."""
        other_constructs = [other] if isinstance(other, Construct) else list(other.constructs)
        if not other_constructs:
            return Architecture(self.constructs)
        if self.constructs and not other_constructs[0].inputs:
            other_constructs[0].link(self.constructs[-1])
        return Architecture(self.constructs + other_constructs)

    def __radd__(self, other):
        return Architecture([other]) + self if isinstance(other, Construct) else NotImplemented

    def __rmul__(self, count: int):
        """``n * arch``: n deep copies stacked; every construct needs '#' in its name."""
        if not isinstance(count, int) or count < 1:
            raise ArchitectureError(f"an architecture can only be repeated a positive whole number of times, "
                                    f"not {count!r}")
        for construct in self.constructs:
            if "#" not in construct.name:
                raise ArchitectureError(f"construct {construct.name!r} is repeated, so its name needs a '#' "
                                        "to be numbered")
        result = Architecture()
        for _ in range(count):
            result = result + copy.deepcopy(self)
        return result

    def __len__(self):
        return len(self.constructs)

    def resolved_names(self) -> dict[int, str]:
        """Final name per construct (by id): '#' replaced with the 1-based position."""
        width = len(str(len(self.constructs)))
        names = {id(c): c.name.replace("#", str(n).zfill(width)) for n, c in enumerate(self.constructs, start=1)}
        if twice := [name for name, count in Counter(names.values()).items() if count > 1]:
            raise ArchitectureError(f"two layers are named {twice[0]!r}; names must be unique")
        return names

    def ordered(self) -> list[Construct]:
        """Constructs in a topological order; a cycle is an error naming its layers."""
        names = self.resolved_names()
        members = {id(c) for c in self.constructs}
        for construct in self.constructs:
            for source in construct.inputs:
                if id(source) not in members:
                    raise ArchitectureError(f"layer {names[id(construct)]!r} is fed by {source.name!r}, "
                                            "which is not part of the architecture")
        order, done = [], set()

        def visit(construct, path):  # depth first; ``path`` holds the constructs being visited
            if id(construct) in done:
                return
            if construct in path:
                cycle = path[path.index(construct):] + [construct]
                raise ArchitectureError("cycle in the network: " + " -> ".join(names[id(c)] for c in cycle))
            for source in construct.inputs:
                visit(source, path + [construct])
            done.add(id(construct))
            order.append(construct)

        for construct in self.constructs:
            visit(construct, [])
        return order

    def validate_types(self):
        """Every construct's layer type is registered; the error names the layer as the summary will (and its
        run-file key) and lists the available types."""
        names = self.resolved_names()
        for construct in self.constructs:
            try:
                plugins.get("layer", construct.layer_type)
            except UnknownComponentError as error:
                where = construct.where or f"layer {names[id(construct)]!r}"
                raise ArchitectureError(f"{where}: {error}") from None


def from_layer_list(specs: list[dict]) -> Architecture:
    """An architecture from run-file tables: ``[{type = "dense", size = 10}, ...]``.

    Each entry may name itself (``name``) and its sources (``inputs = [...]``);
    without ``inputs`` it is fed by the entry before it (input layers by nothing).
    """
    constructs, by_name = [], {}
    for position, spec in enumerate(specs):
        where = f"network.layers[{position}]"
        if not isinstance(spec, dict) or "type" not in spec:
            raise ArchitectureError(f"{where} must be a table with a type, e.g. {{ type = \"dense\", size = 10 }}")
        spec = dict(spec)
        layer_type, sources, name = spec.pop("type"), spec.pop("inputs", None), spec.pop("name", None)
        require(f"{where}.name", "str", name or "")
        require(f"{where}.inputs", "names", sources or [])
        construct = Construct(layer_type, name, **spec)
        construct.where = where
        constructs.append((construct, sources))
        by_name[construct.name] = construct
    names = Architecture([c for c, _ in constructs]).resolved_names()
    for construct, _ in constructs:  # errors name the layer as the network and its summary will: '2-dense'
        construct.where += f" ({names[id(construct)]!r})"
    for position, (construct, sources) in enumerate(constructs):
        if sources is None:
            if position > 0 and construct.layer_type != "input":
                construct.link(constructs[position - 1][0])
            continue
        for source in [sources] if isinstance(sources, str) else sources:
            if source not in by_name:
                named = ", ".join(n for n in by_name if "#" not in n) or "none"
                raise ArchitectureError(f"{construct.where}: input {source!r} is not a layer name "
                                        f"(named layers: {named})")
            construct.link(by_name[source])
    return Architecture([c for c, _ in constructs])

"""Constructs and architectures: a network described before it exists.

A :class:`Construct` stands for a layer: its type, its arguments and the constructs feeding it; nothing is
allocated until a :class:`~sigma_core.model.network.Network` builds the layers on a handler. ``Input(4) + Dense(10)``
stacks constructs, ``n * construct`` stacks n deep copies, and :meth:`Construct.link` joins any acyclic graph.
A ``#`` in a name becomes the construct's position (``"#-dense"`` -> ``"2-dense"``), as in Sigma.
"""

import copy
from collections import Counter

from sigma_core.config import require
from sigma_core.errors import ArchitectureError


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
        params = "".join(f", {key}={value!r}" for key, value in self.params.items())
        return f"Construct({self.layer_type!r}, name={self.name!r}{params})"


class Architecture:
    """Constructs in declaration order, with their links."""

    def __init__(self, constructs=()):
        self.constructs: list[Construct] = list(constructs)

    def __add__(self, other):
        """Stack: ``other``'s first construct, unless it is linked already, is fed by this one's last."""
        others = [other] if isinstance(other, Construct) else other.constructs
        if self.constructs and others and not others[0].inputs:
            others[0].link(self.constructs[-1])
        return Architecture(self.constructs + others)

    def __rmul__(self, count: int):
        """``n * arch``: n deep copies stacked; every construct needs '#' in its name."""
        if not isinstance(count, int) or count < 1:
            raise ArchitectureError(f"an architecture can only be repeated a positive whole number of times, "
                                    f"not {count!r}")
        for construct in self.constructs:
            if "#" not in construct.name:
                raise ArchitectureError(f"construct {construct.name!r} is repeated, so its name needs a '#' "
                                        "to be numbered")
        return sum((copy.deepcopy(self) for _ in range(count)), Architecture())

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
        """Constructs with each after its sources, else in declaration order; a cycle is an error naming its layers."""
        names, order, done = self.resolved_names(), [], set()

        def visit(construct, path):  # depth first; ``path``: the constructs being visited, outermost first
            if id(construct) in done:
                return
            if id(construct) not in names:
                raise ArchitectureError(f"layer {names[id(path[-1])]!r} is fed by {construct.name!r}, "
                                        "which is not part of the architecture")
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


def from_layer_list(specs: list[dict]) -> Architecture:
    """An architecture from run-file tables, ``[{type = "dense", size = 10}, ...]``: each may have a ``name`` and
    its sources by name (``inputs = [...]``); without ``inputs``, the entry before feeds it (an input layer: none)."""
    constructs, sources = [], []
    for position, spec in enumerate(specs):
        where = f"network.layers[{position}]"
        if not isinstance(spec, dict) or "type" not in spec:
            raise ArchitectureError(f"{where} must be a table with a type, e.g. {{ type = \"dense\", size = 10 }}")
        require(f"{where}.name", "str", spec.get("name") or "")
        require(f"{where}.inputs", "names", spec.get("inputs") or [])
        params = {key: value for key, value in spec.items() if key not in ("type", "name", "inputs")}
        constructs.append(Construct(spec["type"], spec.get("name"), **params))
        sources.append(spec.get("inputs"))
    architecture = Architecture(constructs)
    names, by_name = architecture.resolved_names(), {c.name: c for c in constructs}
    for position, (construct, inputs) in enumerate(zip(constructs, sources)):
        construct.where = f"network.layers[{position}] ({names[id(construct)]!r})"  # the summary's name: '2-dense'
        if inputs is None:
            if position > 0 and construct.layer_type != "input":
                construct.link(constructs[position - 1])
            continue
        for source in [inputs] if isinstance(inputs, str) else inputs:
            if source not in by_name:
                named = ", ".join(n for n in by_name if "#" not in n) or "none"
                raise ArchitectureError(f"{construct.where}: input {source!r} is not a layer name "
                                        f"(named layers: {named})")
            construct.link(by_name[source])
    return architecture

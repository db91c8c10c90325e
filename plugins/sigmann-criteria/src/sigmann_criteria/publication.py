"""The registry criteria hooks read: the run's state as one tree, as Sigma published it.

Layout (every identifier is what hooks and run files name)::

    trainer.self, trainer.name
    network.self, network.name
    network.layers.<layer>.<param>      NDArray; each layer registry is tagged
                                        "layer", its type and the type's aliases
                                        (network.layers.*<dense>.weights)
    optimiser.self, optimiser.cost_total, optimiser.learning_rate, optimiser.step
                     (cost_total is the run value cost: the last iteration's, or
                     after an epoch the epoch's mean)
    optimiser.updates.<layer>.<param>   only while optimiser.publish_updates is on
    epoch            completed epochs (0 during the first epoch, as in Sigma)
    iteration        completed iterations of the current epoch
    total_iterations, runtime (seconds since the run started)
    shared           free for hooks to write results into (tagged "shared")

One registry per run, shared by the run's criteria hooks (:meth:`Publication.of`);
it is built once, and :meth:`Publication.refresh` overwrites only the values
that change per iteration, which keeps resolver caches warm. It is refreshed
only when some criteria hook is due (a refresh reads the cost from the device,
as Sigma's registry held it), so a run without them pays nothing.
A background hook gets a registry of the copy of the run's values made for
its thread (:func:`registry_from_values`), tagged as the live one.
"""

from __future__ import annotations

import weakref

from sigma_core import components

from .access import write
from .registry import Registry, RegistryResolver, registry_from_dict

_of_run: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a run's view -> its live Publication


class Publication:
    """A registry and the resolver hooks query it with; :meth:`of` a run is the live one."""

    def __init__(self, registry: Registry, run=None):
        self.registry = registry
        self.resolver = RegistryResolver(registry)
        self.run = run  # the live run view the registry is refreshed from, or None for a copy
        self._parameters = None  # the network.parameters dict the layer registries were built from
        self._refreshed = None  # the event values the registry was last refreshed for

    @classmethod
    def of(cls, run) -> Publication:
        """The live registry of ``run`` (its :class:`~sigma_core.RunView`), built on first use."""
        publication = _of_run.get(run)
        if publication is None:
            trainer = run.trainer
            registry = Registry()
            registry["trainer"] = registry_from_dict({"self": trainer, "name": trainer.name}, ("trainer",))
            registry["shared"] = Registry(("shared",))
            registry["optimiser"] = registry_from_dict({"self": trainer.optimiser}, ("optimiser",))
            publication = _of_run[run] = cls(registry, run)
            publication.refresh()
        return publication

    def refresh(self) -> None:
        """Overwrite what changed since the last event; rebuild layers only if the parameters were replaced."""
        run = self.run
        if run.values is self._refreshed:
            return
        self._refreshed = run.values
        trainer, registry = run.trainer, self.registry
        if trainer.network.parameters is not self._parameters:
            registry["network"] = _network_registry(trainer.network)
            self._parameters = trainer.network.parameters
        registry["epoch"] = trainer.epoch
        registry["iteration"] = trainer.iteration
        registry["total_iterations"] = trainer.total_iterations
        registry["runtime"] = run.values["runtime"]
        optimiser, published = registry["optimiser"], trainer.optimiser.published
        optimiser["cost_total"] = float(run.values["cost"])
        optimiser["learning_rate"] = float(trainer.optimiser.learning_rate)
        optimiser["step"] = trainer.optimiser.steps
        if "updates" in published:
            if "updates" not in optimiser:
                optimiser["updates"] = Registry(("updates",))
            _set_by_parameter_id(optimiser["updates"], published["updates"], registry["network"]["layers"])
        for name, value in list(run.published.items()):  # what background hooks wrote since
            if name.startswith("shared."):
                write(self.resolver, name, value)

    def publish_shared(self, run) -> None:
        """Make every value under ``shared`` a run value of the same name, for the core's hooks to read."""
        if "shared" in self.registry:
            for name, value in _leaves(self.registry["shared"], "shared"):
                run.publish(name, value)

    def layer_tags(self) -> dict:
        """Layer name -> its registry's tags (for a registry built from copied values)."""
        return {name: layer.tags for name, layer in self.registry["network"]["layers"].items()}


def registry_from_values(values, tags: dict) -> Registry:
    """A registry of a threaded hook's copy of the run's values, laid out and tagged as the live one."""
    registry = Registry()
    registry["shared"] = Registry(("shared",))
    optimiser = registry["optimiser"] = Registry(("optimiser",))
    layers, updates = Registry(("layers",)), Registry(("updates",))
    resolver = RegistryResolver(registry)
    for name in values:
        if name == "cost":
            optimiser["cost_total"] = values[name]
        elif name == "learning_rate":
            optimiser["learning_rate"] = values[name]
        elif name in ("epoch", "iteration", "total_iterations", "runtime"):
            registry[name] = values[name]
        elif name.startswith("shared."):
            write(resolver, name, values[name])
        else:
            for prefix, tree in (("network.layers.", layers), ("optimiser.updates.", updates)):
                if name.startswith(prefix):
                    layer, _, param = name[len(prefix):].rpartition(".")
                    if layer not in tree:
                        tree[layer] = Registry(tags.get(layer, ()))
                    tree[layer][param] = values[name]
    if len(layers):
        registry["network"] = registry_from_dict({"layers": layers}, ("network",))
    if len(updates):
        optimiser["updates"] = updates
    return registry


def _network_registry(network) -> Registry:
    layers = Registry(("layers",))
    types = {network.architecture.resolved_names()[id(c)]: c.layer_type for c in network.architecture.ordered()}
    for name, layer in network.layers.items():
        layers[name] = Registry(_layer_tags(types.get(name), layer))
    _set_by_parameter_id(layers, network.parameters, layers)
    return registry_from_dict({"self": network, "name": network.name, "layers": layers}, ("network",))


def _layer_tags(layer_type: str | None, layer) -> set:
    tags = {"layer", type(layer).__name__.lower()}
    if layer_type is not None:
        component = next((c for c in components("layer") if layer_type in (c.name, *c.aliases)), None)
        tags.update((component.name, *component.aliases) if component is not None else (layer_type,))
    return tags


def _set_by_parameter_id(registry: Registry, arrays: dict, layers: Registry) -> None:
    """``{"2-dense.weights": array}`` into ``registry["2-dense"]["weights"]``, tagged like ``layers["2-dense"]``."""
    for parameter_id, array in arrays.items():
        layer, _, param = parameter_id.rpartition(".")
        if layer not in registry:
            registry[layer] = Registry(layers[layer].tags)
        registry[layer][param] = array


def _leaves(registry: Registry, prefix: str):
    for key, value in registry.items():
        if isinstance(value, Registry):
            yield from _leaves(value, f"{prefix}.{key}")
        else:
            yield f"{prefix}.{key}", value

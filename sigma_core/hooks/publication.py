"""What the operator publishes for hooks: one registry of the run's state.

Layout (every identifier is what hooks and run files name)::

    trainer.self, trainer.name
    network.self, network.name
    network.layers.<layer>.<param>      NDArray; each layer registry is tagged
                                        "layer", its type and the type's aliases
                                        (network.layers.*<dense>.weights)
    optimiser.self, optimiser.cost_total, optimiser.learning_rate, optimiser.step
    optimiser.updates.<layer>.<param>   only while optimiser.publish_updates is on
    epoch            completed epochs (0 during the first epoch, as in Sigma)
    iteration        completed iterations of the current epoch
    total_iterations, runtime (seconds since the operator started)
    shared           free for hooks to write results into (tagged "shared")

The tree is built once; :meth:`Publication.refresh` overwrites only the values
that change per iteration, which keeps resolver caches warm. The operator
refreshes only when some hook is due, so a run without hooks pays nothing.
"""

from __future__ import annotations

import time

from .. import plugins
from ..errors import UnknownComponentError
from ..registry import Registry, RegistryResolver, registry_from_dict


class Publication:
    """The hook registry of one trainer and the resolver hooks query it with."""

    def __init__(self, trainer, started: float | None = None):
        self.trainer = trainer
        self.started = time.perf_counter() if started is None else started
        self.registry = Registry()
        self.resolver = RegistryResolver(self.registry)
        self.registry["trainer"] = registry_from_dict({"self": trainer, "name": trainer.name}, ("trainer",))
        self.registry["shared"] = Registry(("shared",))
        self.registry["optimiser"] = registry_from_dict({"self": trainer.optimiser}, ("optimiser",))
        self._parameters = None  # the network.parameters dict the layer registries were built from
        self.refresh()

    def refresh(self) -> None:
        """Overwrite what changes between iterations; rebuild layers only if the parameters were replaced."""
        trainer, registry = self.trainer, self.registry
        if trainer.network.parameters is not self._parameters:
            registry["network"] = _network_registry(trainer.network)
            self._parameters = trainer.network.parameters
        registry["epoch"] = trainer.epoch
        registry["iteration"] = trainer.iteration
        registry["total_iterations"] = trainer.total_iterations
        registry["runtime"] = time.perf_counter() - self.started
        optimiser, published = registry["optimiser"], trainer.optimiser.published
        optimiser["cost_total"] = float(trainer.last_cost)
        optimiser["learning_rate"] = float(trainer.optimiser.learning_rate)
        optimiser["step"] = trainer.optimiser.steps
        if "updates" in published:
            if "updates" not in optimiser:
                optimiser["updates"] = Registry(("updates",))
            _set_by_parameter_id(optimiser["updates"], published["updates"], registry["network"]["layers"])


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
        try:
            component = plugins.get("layer", layer_type)
            tags.update((component.name, *component.aliases))
        except UnknownComponentError:
            tags.add(layer_type)
    return tags


def _set_by_parameter_id(registry: Registry, arrays: dict, layers: Registry) -> None:
    """``{"2-dense.weights": array}`` into ``registry["2-dense"]["weights"]``, tagged like ``layers["2-dense"]``."""
    for parameter_id, array in arrays.items():
        layer, _, param = parameter_id.rpartition(".")
        if layer not in registry:
            registry[layer] = Registry(layers[layer].tags)
        registry[layer][param] = array

"""Value modifiers: change the parameters whose ids match a glob (``"*.weights"``) in place after each step."""

from __future__ import annotations

import fnmatch

from sigma_core import ConfigError

from .hook import CriteriaHook


class ModifierHook(CriteriaHook):
    """Base class: implement :meth:`modify` returning the new NDArray for one parameter.

    Subclasses pass their settings as a dict; each becomes an attribute.
    """

    default_priority = -2000  # before anything reads the parameters

    def __init__(self, parameters: str = "*", *, every=None, settings: dict, **options):
        super().__init__(every, parameters={"parameters": parameters, **settings}, requires=("network.self",),
                         **options)
        self.pattern = parameters
        vars(self).update(settings)

    def invoke(self, registry, resolver):
        network = registry["network"]["self"]
        handler = network.handler
        with handler.no_grad():
            for parameter_id, array in network.parameters.items():
                if fnmatch.fnmatchcase(parameter_id, self.pattern):
                    handler.fill(array, self.modify(handler, array))

    def modify(self, handler, array):
        raise NotImplementedError


class Clip(ModifierHook):
    """Clips every element into ``[minimum, maximum]``."""

    def __init__(self, parameters: str = "*", *, minimum: float = -1.0, maximum: float = 1.0, every=None, **options):
        if minimum > maximum:
            raise ConfigError(f"clip: minimum {minimum} is above maximum {maximum}")
        super().__init__(parameters, every=every, settings={"minimum": minimum, "maximum": maximum}, **options)

    def modify(self, handler, array):
        return handler.clip(array, self.minimum, self.maximum)


class Scale(ModifierHook):
    """Multiplies every element by ``factor`` (e.g. weight decay by shrinking)."""

    def __init__(self, parameters: str = "*", *, factor: float = 1.0, every=None, **options):
        super().__init__(parameters, every=every, settings={"factor": factor}, **options)

    def modify(self, handler, array):
        return handler.multiply(array, self.factor)

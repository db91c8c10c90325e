"""Mergers: how the results of several workers become one global state (Sigma's network mergers).

A merger combines named arrays (parameters, layer state, optimiser memory) of
several workers into a weighted mean, for the ids its entries match (globs on
``"<layer>.<param>"``, as freeze filters). :meth:`AverageMerger.merge` writes
the result into a root network and leaves the others untouched. The ``threads``
operator's model averaging merges whole networks and optimiser memory with one
every k iterations; a :class:`WeightedMerger` weights each worker (by the
records it saw, say). Arrays go through NumPy, so the networks may live on
different handlers.
"""

from __future__ import annotations

import fnmatch

from sigma_core import SigmaError


class AverageMerger:
    """The arithmetic mean of the matching arrays; with no entries given, of every array."""

    def __init__(self, *entries: str):
        self.entries = list(entries or ["*"])

    def add_entry(self, pattern: str) -> None:
        if pattern not in self.entries:
            self.entries.append(pattern)

    def remove_entry(self, pattern: str) -> None:
        if pattern not in self.entries:
            raise SigmaError(f"{type(self).__name__}: no merge entry {pattern!r} (entries: {self.entries})")
        self.entries.remove(pattern)

    def weights(self, count: int) -> list[float]:
        return [1.0] * count

    def merge_arrays(self, states: list[dict]) -> dict:
        """The weighted mean of every matching id of ``states`` (dicts of NumPy arrays, same ids)."""
        weights = self.weights(len(states))
        total = float(sum(weights))
        merged = {}
        for key in states[0]:
            if any(fnmatch.fnmatchcase(key, pattern) for pattern in self.entries):
                values = [w * state[key] for w, state in zip(weights, states) if w]
                merged[key] = sum(values[1:], values[0]) / total
        return merged

    def merge(self, root, networks) -> None:
        """Set ``root``'s matching parameters to the merge of ``networks``' (``root`` may be one of them)."""
        state = root.state_dict()
        state.update(self.merge_arrays([network.state_dict() for network in networks]))
        root.load_state_dict(state)


class WeightedMerger(AverageMerger):
    """Σ wᵢ·xᵢ / Σ wᵢ, one weight per network, in order."""

    def __init__(self, weights, *entries: str):
        super().__init__(*entries)
        self._weights = [float(w) for w in weights]
        if any(w < 0 for w in self._weights) or not sum(self._weights) > 0:
            raise SigmaError(f"WeightedMerger: weights must be >= 0 with a positive sum, got {list(weights)}")

    def weights(self, count: int) -> list[float]:
        if count != len(self._weights):
            raise SigmaError(f"WeightedMerger: {len(self._weights)} weights for {count} networks")
        return self._weights

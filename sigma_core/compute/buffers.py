"""Buffer reuse between training iterations: Sigma's "sessions" and "limbo".

A training step asks for the same buffer shapes every iteration. The buffers handed out in a session go back to a
free list keyed by (shape, dtype) when the next session begins, so after one warm-up step a step allocates nothing.
Buffers made outside a session (parameters, optimiser state, evaluation) are "limbo": plain memory the pool never
notes, freed with their last array, so steps run between sessions (a compiled step) pile nothing up.
:meth:`Handler.keep` moves a session's array into limbo by copying it once.
"""

from collections import defaultdict


class BufferPool:
    """Free lists of same-shaped buffers, recycled at each session start."""

    def __init__(self, xp):
        self.xp = xp
        self.active = False
        self.allocations = 0  # fresh buffers allocated inside sessions, ever
        self._free = defaultdict(list)
        self._in_use = []

    def empty(self, shape, dtype):
        """An uninitialised buffer; recycled from the last session when possible."""
        if not self.active:
            return self.xp.empty(shape, dtype)
        key = (shape, dtype)
        free = self._free.get(key)
        if free:
            buffer = free.pop()
        else:
            buffer = self.xp.empty(shape, dtype)
            self.allocations += 1
        self._in_use.append((key, buffer))
        return buffer

    def begin(self):
        """Recycle every buffer handed out during the previous session."""
        free = self._free
        for key, buffer in self._in_use:
            free[key].append(buffer)
        self._in_use = []
        self.active = True

    def end(self):
        self.active = False

    @property
    def handed_out(self) -> int:
        """How many buffers this session has handed out so far."""
        return len(self._in_use)

    def handed_out_since(self, start: int) -> list:
        """The buffers this session handed out after the first ``start``, in order: what a recorder notes
        about each kernel call it watches (which buffers the call took), so that a replay can hand them back."""
        return [buffer for _, buffer in self._in_use[start:]]

    def detach(self):
        """Take the buffers of the session just ended out of reuse for good (:meth:`Handler.detach_session`)."""
        self._in_use = []

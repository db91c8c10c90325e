"""Buffer reuse between training iterations: Sigma's "sessions" and "limbo".

A training step allocates the same set of array shapes every iteration. While a
session is active every buffer a kernel asks for is remembered; when the next
session begins those buffers go back into a free list keyed by (shape, dtype)
and the next step takes them from there instead of asking the allocator. After
one warm-up step a step of unchanged shapes therefore allocates nothing.

Buffers created outside a session (parameters, optimiser state, evaluation,
predictions) are never recycled; that is Sigma's "limbo". The pool does not
even note them: they are plain memory, freed with the last array holding them,
so however many steps run between two sessions (a compiled step replays
without one) nothing piles up. :meth:`Handler.keep` moves an array made inside
a session into limbo by copying it once.
"""

from __future__ import annotations

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

    def detach(self) -> list:
        """Take the buffers of the session just ended out of reuse for good (a compiled training step owns them:
        :meth:`Handler.detach_session <sigma_core.handler.Handler.detach_session>`)."""
        buffers, self._in_use = [buffer for _, buffer in self._in_use], []
        return buffers

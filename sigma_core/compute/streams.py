"""Counter-based random streams, for handlers whose kernels draw their own random numbers.

Call number c draws from the stream keyed ``splitmix64(key + c * GOLDEN)``: no generator state
lives beside the data (on a device, in a compiled loop), a replayed step draws the next stream
as a normal one does, and handlers that hash the same way (``cpu``, ``cuda``) draw the same bits,
so their state shares one checkpoint key and a run resumes exactly on either.
"""

import numpy

GOLDEN = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1
#: Key of the streams' state next to NumPy's bit-generator fields (NumPy ignores unknown keys).
STATE_KEY = "counter_streams"


def splitmix64(value: int) -> int:
    z = value & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class CounterStreams:
    def __init__(self, seed=None):
        # An independent child of the seed: never the stream of a NumPy generator seeded the same way.
        child = numpy.random.SeedSequence(seed).spawn(1)[0]
        self.key, self.calls = int(child.generate_state(1, numpy.uint64)[0]), 0

    def next(self) -> int:
        """The next call's stream key."""
        self.calls += 1
        return splitmix64(self.key + (self.calls - 1) * GOLDEN)

    def save(self, state: dict) -> dict:
        return {**state, STATE_KEY: {"key": self.key, "calls": self.calls}}

    def load(self, state: dict):
        if STATE_KEY in state:
            self.key, self.calls = int(state[STATE_KEY]["key"]), int(state[STATE_KEY]["calls"])

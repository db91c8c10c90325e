"""sigmann-replay: recorded training steps, replayed without the framework around them.

The ``replay`` step compiler (``[training] compile = "replay"``, or ``"auto"``, the default, when this is
installed) records a training step's kernel calls once per signature and replays them on their buffers:
the same bits as a normal step, with no tape, NDArray wrapping, VJP dispatch or buffer-pool look-up
(:mod:`sigmann_replay.replay`). ``sigma explain`` and ``sigma train --explain`` print the recorded step
(:mod:`sigmann_replay.explain`).

The public API (imported on first use, so that plugin discovery stays cheap): :class:`StepReplay` (the
compiler: ``trainer.compile_step(StepReplay.compile)``; ``StepReplay.of(trainer)`` finds it again), :class:`Recording` (one recorded step),
:class:`NotReplayable` (raised to decline replaying a step, by a handler's ``capture`` too) and
:class:`ReplayPool` (the buffer pool's stand-in that hands back recorded buffers, in order).
"""

import importlib

_PUBLIC = ("StepReplay", "Recording", "Recorder", "NotReplayable", "ReplayPool")

__all__ = list(_PUBLIC)


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'sigmann_replay' has no attribute {name!r}")
    value = getattr(importlib.import_module("sigmann_replay.replay"), name)
    globals()[name] = value
    return value
